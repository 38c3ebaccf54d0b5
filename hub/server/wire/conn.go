package wire

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// conn is one client connection. Its goroutine (serve) reads and handles
// every frame; writes are queued in out, under mu, and written by one
// writer at a time: the goroutine that queued them when it may block (the
// connection's own), or a goroutine started for them (flush).
type conn struct {
	s    *Server
	nc   net.Conn   // the socket
	rw   net.Conn   // nc, or the TLS connection over it
	tls  *tls.Conn  // nil: plaintext, or taken over (tlsRecords)
	sock *tlsSocket // what tls reads and writes; nil: plaintext
	// tlsrw reads and writes application data: the tls.Conn, or the
	// records once they took the connection over. nil: plaintext.
	tlsrw io.ReadWriter
	base  context.Context // the streams' values: the peer

	// The connection's goroutine only.
	pending     []byte // read before rw: the frames read while sniffing
	rbuf        []byte // what one read of rw took: a small frame whole
	rpos, rend  int    // rbuf[rpos:rend] is not handled yet
	hdr         [frameHeaderLen]byte
	one         [1]byte
	done        chan struct{} // a worker's word that the call it ran returned
	dec         *hpack.Decoder
	block       []byte // a header block being gathered, nil if none
	blockStream uint32
	blockEnd    bool   // its HEADERS had END_STREAM
	recvAvail   int64  // what the client may still send on the connection
	recvUnacked uint32 // received and handled, not yet granted again
	clientPing  time.Time
	strikes     int
	opens       float64   // streams the client may open now (StreamBurst, StreamRate)
	opensAt     time.Time // when opens was last filled

	lastStream atomic.Uint32 // the highest stream id the client opened
	lastRead   atomic.Int64  // UnixNano of the last frame read

	// Once the poller serves the connection (Linux): its socket, and who
	// reads it. rbuf is then small, or big while a frame longer than
	// small is partly read, both from pools; none while nothing of a
	// frame waits (release).
	pfd   atomic.Pointer[pollFD] // set under mu, while no writer runs
	state atomic.Int32           // stateIdle, stateRunning, stateAgain
	small *[readBufSize]byte
	big   *[frameHeaderLen + maxFrameSize]byte

	mu         sync.Mutex
	streams    map[uint32]*Stream
	out        []byte // frames queued for the socket
	writing    bool   // a writer runs
	closed     bool
	served     bool // past the first stream: the connection is this server's
	goingAway  bool // GOAWAY sent: close once out is written
	sendAvail  int64
	peerWindow int64 // the client's initial stream window
	peerFrame  int   // the client's largest frame
	pingOut    bool  // a keepalive ping waits for an answer
	pingAt     time.Time
	// responded: headers or data went out since the client's last ping,
	// which clears its strikes (a client's flow-control pings follow what
	// it receives).
	responded bool
	// A polled connection's writer waits for room in the socket
	// (wblocked, since wblockedAt); wevents counts the poller's word that
	// there is room.
	wblocked   bool
	wblockedAt time.Time
	wevents    uint64
}

// A polled connection's state: no worker has it, a worker reads it, a
// worker reads it and the poller said since that there is more.
const (
	stateIdle int32 = iota
	stateRunning
	stateAgain
)

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, rw: nc, recvAvail: defaultWindow, sendAvail: defaultWindow, peerWindow: defaultWindow,
		peerFrame: maxFrameSize}
	c.lastRead.Store(time.Now().UnixNano())
	return c
}

// errKeepalive closes a connection that did not answer a ping,
// errWriteTimeout a polled one that took nothing for WriteTimeout.
var (
	errKeepalive    = errors.New("wire: the client did not answer a keepalive ping")
	errWriteTimeout = errors.New("wire: the client took nothing written for the write timeout")
)

// serve is the connection's first goroutine: TLS handshake, preface, the
// first stream's method (sniff), then the hand-off, or a goroutine of
// the frame loop's own. The loop starts on a fresh stack: the handshake's
// and the sniffing's depth would stay with the connection for its life
// otherwise, and an idle edge is this goroutine parked in a read.
func (c *conn) serve() {
	setUserTimeout(c.nc, c.s.cfg.KeepaliveTimeout)
	err := c.start()
	if err == nil {
		if p := c.s.poller; p != nil && p.add(c) {
			return
		}
		go c.loop()
		return
	}
	if errors.Is(err, errHandOff) {
		c.nc.SetDeadline(time.Time{})
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if !closed && c.s.fallback.handOff(&handedConn{Conn: c.rw, prefix: c.pending, tls: c.tls}) {
			c.s.forget(c, true)
			c.s.wg.Done()
			return
		}
	}
	c.end(err)
}

// loop is the frame loop's goroutine.
func (c *conn) loop() { c.end(c.readLoop()) }

// end closes the connection after err (a connection error says GOAWAY
// first) and lets the server forget it (a polled connection's close
// does).
func (c *conn) end(err error) {
	pfd := c.pfd.Load()
	if pfd == nil {
		defer c.gone()
	}
	var ce connError
	if errors.As(err, &ce) {
		c.mu.Lock()
		c.out = appendGoAway(c.out, c.lastStream.Load(), ce.code, ce.why)
		out := c.out
		c.out = nil
		// A polled connection's writer that runs would mix its bytes with
		// these: the GOAWAY waits for none.
		busy := pfd != nil && c.writing
		c.writing = c.writing || pfd != nil
		c.mu.Unlock()
		if pfd != nil {
			if !busy {
				c.writePolled(pfd, out) // what the socket takes now
			}
		} else {
			c.rw.SetWriteDeadline(time.Now().Add(time.Second))
			c.rw.Write(out)
		}
	}
	c.close(err)
}

// gone lets the server forget the connection, once.
func (c *conn) gone() {
	c.s.forget(c, false)
	c.s.wg.Done()
}

// errHandOff is start's answer for a connection the fallback serves.
var errHandOff = errors.New("wire: hand off")

// start handshakes, reads the client preface, sends the server's, and
// reads frames until the first stream's header block says its method.
// For a method without a handler it returns errHandOff with every byte
// read in pending (the preface too): the fallback's server reads them
// first, as if it had read them itself, and it sends its own SETTINGS
// (the same as ours, which the client applies twice). Otherwise the
// frames read go through the frame loop, the preface left out.
func (c *conn) start() error {
	cfg := &c.s.cfg
	if cfg.TLS != nil {
		c.nc.SetDeadline(time.Now().Add(handshakeTimeout))
		c.sock = &tlsSocket{Conn: c.nc, c: c, keys: &tlsKeys{}, limit: true}
		tc := tls.Server(c.sock, c.s.tls)
		if err := tc.Handshake(); err != nil {
			if cfg.HandshakeFailed != nil {
				cfg.HandshakeFailed(c.nc.RemoteAddr(), err)
			}
			return err
		}
		c.sock.handshaken = true
		c.nc.SetDeadline(time.Time{})
		c.rw, c.tls, c.tlsrw = tc, tc, tc
	}
	p := &peer.Peer{Addr: c.nc.RemoteAddr(), LocalAddr: c.nc.LocalAddr()}
	if c.tls != nil {
		p.AuthInfo = credentials.TLSInfo{State: c.tls.ConnectionState(),
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	}
	c.base = peer.NewContext(context.Background(), p)
	if err := c.writeNow(c.s.settings); err != nil {
		return err
	}
	method, replay, err := c.sniff()
	c.rw.SetDeadline(time.Time{})
	if errors.Is(err, errSniffLimit) {
		err = nil // not a client of ours: the fallback's to judge
	}
	if err != nil {
		return err
	}
	if _, ok := c.s.handlers[method]; !ok {
		c.pending = replay
		if c.sock != nil {
			c.sock.takeOver(nil) // the tls.Conn's from now on
		}
		return errHandOff
	}
	c.pending = replay[len(clientPreface):]
	if c.sock != nil {
		r, opened, err := c.sock.takeOver(c.tls)
		if err != nil {
			return err
		}
		if r != nil {
			c.pending = append(c.pending, opened...)
			c.rw, c.tls, c.tlsrw = r, nil, r
			c.s.mu.Lock()
			c.s.stats.TLSRecords++
			c.s.mu.Unlock()
		}
	}
	c.rbuf = make([]byte, readBufSize)
	c.dec = hpack.NewDecoder(4096, nil)
	c.dec.SetMaxStringLength(maxHeaderBlock)
	c.mu.Lock()
	c.served = true
	c.streams = map[uint32]*Stream{}
	// Beside the SETTINGS sent before: the connection window, which a
	// connection handed off must not have had.
	c.out = appendWindowUpdate(c.out, 0, cfg.ConnWindow-defaultWindow)
	c.recvAvail = int64(cfg.ConnWindow)
	c.mu.Unlock()
	c.flushHere()
	return nil
}

// writeNow writes b on the calling goroutine, bounded by WriteTimeout
// (what sniff writes, alone on the connection).
func (c *conn) writeNow(b []byte) error {
	c.rw.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	_, err := c.rw.Write(b)
	return err
}

// handshakeTimeout bounds a TLS handshake.
const handshakeTimeout = 10 * time.Second

// maxSniffBytes bounds what is read, and kept, before the first stream's
// method is known; maxHeaderBlock bounds a header block.
const (
	maxSniffBytes  = 64 << 10
	maxHeaderBlock = 64 << 10
)

var errSniffLimit = errors.New("wire: no stream in the connection's first 64 KiB")

// sniff reads until the first complete header block and returns the
// :path it names (decoded by a decoder of its own: the block is the
// connection's first, so no earlier state matters) and the bytes to
// replay: all it read, but the PINGs, which it answered itself. It
// alone writes on the connection until it returns, so a connection
// handed off has no write of ours in flight. A client that opens no
// stream is kept as long as it answers pings (KeepaliveTime, Timeout).
func (c *conn) sniff() (method string, replay []byte, err error) {
	cfg := &c.s.cfg
	// buf[:kept] is what the fallback would read (the PINGs taken out as
	// they are met), buf[kept:off] their dropped bytes, buf[off:] not
	// parsed yet.
	buf := make([]byte, 0, 1024)
	kept, off := 0, 0
	var block []byte
	pingOut := false
	for {
		for {
			if off == 0 {
				if len(buf) < len(clientPreface) {
					break
				}
				if string(buf[:len(clientPreface)]) != clientPreface {
					return "", nil, fmt.Errorf("wire: %s: not an HTTP/2 client preface", c.nc.RemoteAddr())
				}
				kept, off = len(clientPreface), len(clientPreface)
			}
			if len(buf)-off < frameHeaderLen {
				break
			}
			fh := parseFrameHeader(buf[off:])
			if fh.length > maxFrameSize {
				return "", nil, connErrorf(codeFrameSize, "%v over %d bytes", fh, maxFrameSize)
			}
			end := off + frameHeaderLen + int(fh.length)
			if end > len(buf) {
				break
			}
			frame, payload := buf[off:end], buf[off+frameHeaderLen:end]
			off = end
			c.lastRead.Store(time.Now().UnixNano())
			switch fh.typ {
			case framePing:
				if len(payload) != 8 {
					return "", nil, connErrorf(codeFrameSize, "PING of %d bytes", len(payload))
				}
				if fh.has(flagAck) {
					pingOut = false
				} else if err := c.writeNow(appendPing(nil, true, [8]byte(payload))); err != nil {
					return "", nil, err
				}
				continue // answered here: not for the fallback
			case frameHeaders:
				b, err := headerFragment(fh, payload)
				if err != nil {
					return "", nil, err
				}
				block = append(block[:0], b...)
			case frameContinuation:
				if block == nil {
					return "", nil, connErrorf(codeProtocol, "CONTINUATION without HEADERS")
				}
				block = append(block, payload...)
			}
			kept += copy(buf[kept:], frame)
			if (fh.typ == frameHeaders || fh.typ == frameContinuation) && fh.has(flagEndHeaders) {
				dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
					if f.Name == ":path" {
						method = f.Value
					}
				})
				dec.SetMaxStringLength(maxHeaderBlock)
				if _, err := dec.Write(block); err != nil {
					return "", nil, connErrorf(codeCompression, "the first header block: %v", err)
				}
				return method, append(buf[:kept], buf[off:]...), nil
			}
		}
		if len(buf) >= maxSniffBytes {
			return "", append(buf[:kept], buf[off:]...), errSniffLimit
		}
		wait := cfg.KeepaliveTime
		if pingOut {
			wait = cfg.KeepaliveTimeout
		}
		c.rw.SetReadDeadline(time.Now().Add(wait))
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := c.rw.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		var ne net.Error
		switch {
		case n > 0 || err == nil:
		case errors.As(err, &ne) && ne.Timeout() && !pingOut:
			pingOut = true
			if err := c.writeNow(appendPing(nil, false, pingData)); err != nil {
				return "", nil, err
			}
		case errors.As(err, &ne) && ne.Timeout():
			return "", nil, errKeepalive
		default:
			return "", nil, err
		}
	}
}

// headerFragment is a HEADERS frame's header block fragment: its payload
// without padding and priority.
func headerFragment(fh frameHeader, p []byte) ([]byte, error) {
	pad := 0
	if fh.has(flagPadded) {
		if len(p) < 1 {
			return nil, connErrorf(codeProtocol, "%v: no pad length", fh)
		}
		pad, p = int(p[0]), p[1:]
	}
	if fh.has(flagPriority) {
		if len(p) < 5 {
			return nil, connErrorf(codeProtocol, "%v: no priority", fh)
		}
		p = p[5:]
	}
	if pad > len(p) {
		return nil, connErrorf(codeProtocol, "%v: padding longer than the frame", fh)
	}
	return p[:len(p)-pad], nil
}

// handedConn is a connection handed to the fallback: it reads the bytes
// read while sniffing first.
type handedConn struct {
	net.Conn
	prefix []byte
	tls    *tls.Conn
}

func (h *handedConn) Read(p []byte) (int, error) {
	if len(h.prefix) > 0 {
		n := copy(p, h.prefix)
		h.prefix = h.prefix[n:]
		return n, nil
	}
	return h.Conn.Read(p)
}

// readFull reads len(p) bytes: what sniffing read first, then the
// connection, through rbuf: a status or a ping (a frame of a few hundred
// bytes, its header with it) takes one read.
func (c *conn) readFull(p []byte) error {
	for len(p) > 0 {
		switch {
		case len(c.pending) > 0:
			n := copy(p, c.pending)
			if c.pending = c.pending[n:]; len(c.pending) == 0 {
				c.pending = nil
			}
			p = p[n:]
		case c.rpos < c.rend:
			n := copy(p, c.rbuf[c.rpos:c.rend])
			c.rpos += n
			p = p[n:]
		case c.pfd.Load() != nil:
			// The poller hands on whole frames only.
			return io.ErrUnexpectedEOF
		case len(p) >= len(c.rbuf):
			_, err := io.ReadFull(c.rw, p)
			return err
		default:
			n, err := c.rw.Read(c.rbuf)
			c.rpos, c.rend = 0, n
			if n == 0 {
				if err == nil {
					err = io.ErrNoProgress
				}
				return err
			}
		}
	}
	return nil
}

// readBufSize is rbuf's size: the frames of an idle edge (a status, a
// ping) fit, and 10,000 connections hold 5 MB of it.
const readBufSize = 512

// framePool holds the buffers frame payloads are read into (all but
// DATA's, which go where their messages are gathered).
var framePool = sync.Pool{New: func() any { return new([maxFrameSize]byte) }}

// discard reads and drops n bytes.
func (c *conn) discard(n int) error {
	if n == 0 {
		return nil
	}
	buf := framePool.Get().(*[maxFrameSize]byte)
	defer framePool.Put(buf)
	for n > 0 {
		k := min(n, len(buf))
		if err := c.readFull(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// readLoop handles frames until the connection fails or closes.
func (c *conn) readLoop() error {
	for {
		if err := c.readFull(c.hdr[:]); err != nil {
			return err
		}
		c.lastRead.Store(time.Now().UnixNano())
		if err := c.frame(parseFrameHeader(c.hdr[:])); err != nil {
			return err
		}
	}
}

// frame handles the frame whose header is fh: its payload is what
// readFull reads next.
func (c *conn) frame(fh frameHeader) error {
	if fh.length > maxFrameSize {
		return connErrorf(codeFrameSize, "%v over %d bytes", fh, maxFrameSize)
	}
	if c.block != nil && fh.typ != frameContinuation {
		return connErrorf(codeProtocol, "%v inside a header block", fh)
	}
	if fh.typ == frameData {
		return c.onData(fh)
	}
	if c.pfd.Load() != nil { // the payload is in rbuf
		p := c.rbuf[c.rpos : c.rpos+int(fh.length)]
		c.rpos += int(fh.length)
		return c.onFrame(fh, p)
	}
	buf := framePool.Get().(*[maxFrameSize]byte)
	defer framePool.Put(buf)
	p := buf[:fh.length]
	if err := c.readFull(p); err != nil {
		return err
	}
	return c.onFrame(fh, p)
}

// process is a worker's turn with a polled connection: it handles the
// whole frames buffered, reads what the socket has and handles it, until
// the socket has no more, and once more if the poller said meanwhile
// that it has.
func (c *conn) process() {
	for {
		if err := c.readPolled(); err != nil {
			c.end(err)
			return
		}
		if c.state.CompareAndSwap(stateRunning, stateIdle) {
			return
		}
		c.state.Store(stateRunning)
	}
}

// readable is the poller's word that c has something to read: true when
// a worker should take c (no worker has it).
func (c *conn) readable() bool {
	for {
		switch c.state.Load() {
		case stateIdle:
			if c.state.CompareAndSwap(stateIdle, stateRunning) {
				return true
			}
		case stateRunning:
			if c.state.CompareAndSwap(stateRunning, stateAgain) {
				return false
			}
		default:
			return false
		}
	}
}

// readPolled handles the whole frames in rbuf, then reads the socket
// into rbuf's room and handles what came, until a read leaves room (the
// socket had no more: its next bytes are the poller's next event) or
// finds nothing. Over TLS it reads until the tls.Conn says it needs
// more than the socket had (errPollAgain): a read returns at most one
// record, and the next may be read already.
func (c *conn) readPolled() error {
	if c.rbuf == nil {
		c.small = smallPool.Get().(*[readBufSize]byte)
		c.rbuf = c.small[:]
	}
	defer c.release()
	if err := c.frames(); err != nil {
		return err
	}
	if c.sock != nil {
		c.sock.drained = false
	}
	for {
		room := len(c.rbuf) - c.rend
		var n int
		var err error
		if c.tlsrw != nil {
			n, err = c.tlsrw.Read(c.rbuf[c.rend:])
		} else {
			n, err = c.pfd.Load().read(c.rbuf[c.rend:])
		}
		if n > 0 {
			c.rend += n
			c.lastRead.Store(time.Now().UnixNano())
			if err := c.frames(); err != nil {
				return err
			}
		}
		switch {
		case err == errWouldBlock:
			return nil
		case err == errPollAgain:
			if c.sock.pending() {
				c.flushHere() // the tls.Conn's answer to what it read (a KeyUpdate)
			}
			return nil
		case err != nil:
			return err
		case n == 0:
			return io.EOF
		case c.tlsrw == nil && n < room:
			return nil
		}
	}
}

// frames handles every whole frame in rbuf, and leaves what is left of
// one at rbuf's start, in a buffer that holds that frame whole.
func (c *conn) frames() error {
	for {
		left := c.rend - c.rpos
		if left < frameHeaderLen {
			break
		}
		fh := parseFrameHeader(c.rbuf[c.rpos:])
		if fh.length > maxFrameSize {
			return connErrorf(codeFrameSize, "%v over %d bytes", fh, maxFrameSize)
		}
		if left < frameHeaderLen+int(fh.length) {
			break
		}
		c.rpos += frameHeaderLen
		if err := c.frame(fh); err != nil {
			return err
		}
	}
	need := readBufSize
	left := c.rbuf[c.rpos:c.rend]
	if len(left) >= frameHeaderLen {
		need = max(need, frameHeaderLen+int(parseFrameHeader(left).length))
	}
	var to []byte
	switch {
	case need > readBufSize && c.big == nil:
		c.big = bigPool.Get().(*[frameHeaderLen + maxFrameSize]byte)
		to = c.big[:]
	case need > readBufSize:
		to = c.big[:]
	default:
		if c.small == nil {
			c.small = smallPool.Get().(*[readBufSize]byte)
		}
		to = c.small[:]
	}
	if c.rpos == 0 && len(c.rbuf) > 0 && &to[0] == &c.rbuf[0] {
		return nil
	}
	c.rend = copy(to, left)
	c.rpos = 0
	c.rbuf = to
	if need <= readBufSize && c.big != nil {
		bigPool.Put(c.big)
		c.big = nil
	}
	return nil
}

// release lets a polled connection's buffer go back to the pool when
// nothing of a frame waits in it, so that 10,000 idle edges hold no read
// buffer: the workers' turns use the few there are.
func (c *conn) release() {
	if c.rpos < c.rend || c.small == nil || c.big != nil {
		return
	}
	smallPool.Put(c.small)
	c.small, c.rbuf, c.rpos, c.rend = nil, nil, 0, 0
}

// smallPool holds the read buffers of polled connections.
var smallPool = sync.Pool{New: func() any { return new([readBufSize]byte) }}

// bigPool holds the buffers of polled connections while a frame longer
// than readBufSize is partly read.
var bigPool = sync.Pool{New: func() any { return new([frameHeaderLen + maxFrameSize]byte) }}

// stream returns the open stream id, nil if none.
func (c *conn) stream(id uint32) *Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

func (c *conn) openStreams() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams)
}

func (c *conn) onData(fh frameHeader) error {
	n := int(fh.length)
	if fh.stream == 0 {
		return connErrorf(codeProtocol, "DATA on stream 0")
	}
	if int64(n) > c.recvAvail {
		return connErrorf(codeFlowControl, "%v past the connection window (%d)", fh, c.recvAvail)
	}
	c.recvAvail -= int64(n)
	data, pad := n, 0
	if fh.has(flagPadded) {
		if n < 1 {
			return connErrorf(codeProtocol, "%v: no pad length", fh)
		}
		if err := c.readFull(c.one[:]); err != nil {
			return err
		}
		pad = int(c.one[0])
		if data = n - 1 - pad; data < 0 {
			return connErrorf(codeProtocol, "%v: padding longer than the frame", fh)
		}
	}
	st := c.stream(fh.stream)
	if st == nil && fh.stream > c.lastStream.Load() {
		return connErrorf(codeProtocol, "DATA on idle stream %d", fh.stream)
	}
	if st != nil && st.remoteDone() {
		st.fail(codeStreamClosed, status.Error(codes.Internal, "wire: DATA after the client ended the stream"))
		st = nil
	}
	if st != nil && int64(n) > st.recvAvail {
		st.fail(codeFlowControl, status.Errorf(codes.Internal, "wire: the client sent past the stream's window (%d)", st.recvAvail))
		st = nil
	}
	var err error
	if st == nil {
		err = c.discard(data)
	} else {
		st.recvAvail -= int64(n)
		err = st.take(data)
	}
	if err == nil {
		err = c.discard(pad)
	}
	if err != nil {
		return err
	}
	c.credit(st, uint32(n))
	if st != nil && fh.has(flagEndStream) {
		st.remoteClose()
	}
	return nil
}

// credit grants again the n bytes handled: a WINDOW_UPDATE once a
// quarter of the connection's (or the stream's) window waits for one.
// (Granting each message's bytes at once would answer every status,
// which a client's keepalive counts as the server's activity, sparing
// its pings: measured, the write a status cost more than the ping and
// its answer every other status.)
func (c *conn) credit(st *Stream, n uint32) {
	c.recvUnacked += n
	var conn, strm uint32
	if c.recvUnacked >= c.s.cfg.ConnWindow/4 {
		conn, c.recvUnacked = c.recvUnacked, 0
		c.recvAvail += int64(conn)
	}
	if st != nil {
		st.recvUnacked += n
		if st.recvUnacked >= c.s.cfg.StreamWindow/4 {
			strm, st.recvUnacked = st.recvUnacked, 0
			st.recvAvail += int64(strm)
		}
	}
	if conn == 0 && strm == 0 {
		return
	}
	c.mu.Lock()
	if conn > 0 {
		c.out = appendWindowUpdate(c.out, 0, conn)
	}
	if strm > 0 && !st.ended {
		c.out = appendWindowUpdate(c.out, st.id, strm)
	}
	c.mu.Unlock()
	c.flushHere()
}

func (c *conn) onFrame(fh frameHeader, p []byte) error {
	switch fh.typ {
	case frameHeaders:
		if fh.stream == 0 || fh.stream%2 == 0 {
			return connErrorf(codeProtocol, "HEADERS on stream %d (clients open odd ones)", fh.stream)
		}
		b, err := headerFragment(fh, p)
		if err != nil {
			return err
		}
		c.block = append(make([]byte, 0, len(b)), b...)
		c.blockStream, c.blockEnd = fh.stream, fh.has(flagEndStream)
		if fh.has(flagEndHeaders) {
			return c.onBlock()
		}
	case frameContinuation:
		if c.block == nil || fh.stream != c.blockStream {
			return connErrorf(codeProtocol, "%v without its HEADERS", fh)
		}
		if len(c.block)+len(p) > maxHeaderBlock {
			return connErrorf(codeProtocol, "a header block over %d bytes", maxHeaderBlock)
		}
		c.block = append(c.block, p...)
		if fh.has(flagEndHeaders) {
			return c.onBlock()
		}
	case frameSettings:
		return c.onSettings(fh, p)
	case framePing:
		return c.onPing(fh, p)
	case frameWindowUpdate:
		return c.onWindowUpdate(fh, p)
	case frameRSTStream:
		if len(p) != 4 {
			return connErrorf(codeFrameSize, "%v: want 4 bytes", fh)
		}
		if fh.stream == 0 || fh.stream > c.lastStream.Load() {
			return connErrorf(codeProtocol, "RST_STREAM of idle stream %d", fh.stream)
		}
		if st := c.stream(fh.stream); st != nil {
			st.reset(status.Errorf(codes.Canceled, "wire: the client reset the stream (code %d)", binary.BigEndian.Uint32(p)))
		}
	case frameGoAway:
		if fh.stream != 0 {
			return connErrorf(codeProtocol, "GOAWAY on stream %d", fh.stream)
		}
		// The client opens no more streams; those open go on until they
		// end, and the client closes the connection.
	case framePushPromise:
		return connErrorf(codeProtocol, "PUSH_PROMISE from a client")
	}
	// PRIORITY and unknown frame types are ignored.
	return nil
}

// onBlock handles a complete header block: a new stream, or trailers
// ending one.
func (c *conn) onBlock() error {
	block, id, endStream := c.block, c.blockStream, c.blockEnd
	c.block = nil
	fields, err := c.dec.DecodeFull(block)
	if err != nil {
		return connErrorf(codeCompression, "stream %d's header block: %v", id, err)
	}
	if id <= c.lastStream.Load() {
		st := c.stream(id)
		switch {
		case st == nil:
			return nil // reset or ended: what the client still had on its way
		case !endStream || st.remoteDone():
			return connErrorf(codeProtocol, "a second header block on stream %d, not ending it", id)
		}
		st.remoteClose() // trailers from the client: gRPC has none to say
		return nil
	}
	c.lastStream.Store(id)
	if !c.mayOpen(time.Now()) {
		return connError{code: codeEnhanceYourCalm, why: "too_many_streams"}
	}
	st := newStream(c, id)
	c.mu.Lock()
	refused := c.goingAway || len(c.streams) >= c.s.cfg.MaxStreams || c.closed
	if refused {
		c.out = appendRSTStream(c.out, id, codeRefusedStream)
	} else {
		c.streams[id] = st
	}
	c.mu.Unlock()
	if refused {
		c.flushHere()
		return nil
	}
	req, err := parseRequest(fields)
	st.req = req
	if err == nil {
		if h := c.s.handlers[req.method]; h == nil {
			if f := c.s.cfg.Unhandled; f != nil {
				c.s.call(c, func() { err = f(st) })
			}
			if err == nil {
				err = status.Errorf(codes.Unimplemented, "wire: %s is not served on a connection whose first stream was another service's: call it on a connection of its own", req.method)
			}
		} else {
			var rcv Receiver
			c.s.call(c, func() { rcv, err = h.Open(st) })
			if err == nil {
				st.opened(rcv)
			}
		}
	}
	st.req.md = nil // Open's alone: the stream lasts, its token need not
	if err != nil {
		st.End(err)
		return nil
	}
	if endStream {
		st.remoteClose()
	}
	return nil
}

// mayOpen takes one stream from the connection's budget, refilled at
// StreamRate up to StreamBurst; false when it is empty.
func (c *conn) mayOpen(now time.Time) bool {
	cfg := &c.s.cfg
	if c.opensAt.IsZero() {
		c.opens = float64(cfg.StreamBurst)
	} else {
		c.opens = min(float64(cfg.StreamBurst), c.opens+now.Sub(c.opensAt).Seconds()*cfg.StreamRate)
	}
	c.opensAt = now
	if c.opens < 1 {
		return false
	}
	c.opens--
	return true
}

func (c *conn) onSettings(fh frameHeader, p []byte) error {
	if fh.stream != 0 {
		return connErrorf(codeProtocol, "SETTINGS on stream %d", fh.stream)
	}
	if fh.has(flagAck) {
		if len(p) != 0 {
			return connErrorf(codeFrameSize, "SETTINGS ACK with a payload")
		}
		// The client's encoder now keeps no table (HEADER_TABLE_SIZE 0).
		c.dec.SetAllowedMaxDynamicTableSize(0)
		return nil
	}
	if len(p)%6 != 0 {
		return connErrorf(codeFrameSize, "SETTINGS of %d bytes", len(p))
	}
	c.mu.Lock()
	for ; len(p) > 0; p = p[6:] {
		id, v := binary.BigEndian.Uint16(p), binary.BigEndian.Uint32(p[2:])
		switch id {
		case settingInitialWindowSize:
			if v > maxWindow {
				c.mu.Unlock()
				return connErrorf(codeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE %d", v)
			}
			delta := int64(v) - c.peerWindow
			c.peerWindow = int64(v)
			for _, st := range c.streams {
				st.sendAvail += delta
			}
		case settingMaxFrameSize:
			if v < maxFrameSize || v > 1<<24-1 {
				c.mu.Unlock()
				return connErrorf(codeProtocol, "SETTINGS_MAX_FRAME_SIZE %d", v)
			}
			c.peerFrame = int(v)
		case settingEnablePush:
			if v > 1 {
				c.mu.Unlock()
				return connErrorf(codeProtocol, "SETTINGS_ENABLE_PUSH %d", v)
			}
		}
	}
	c.out = appendSettingsAck(c.out)
	c.pumpAll()
	c.mu.Unlock()
	c.flushHere()
	return nil
}

func (c *conn) onPing(fh frameHeader, p []byte) error {
	if len(p) != 8 {
		return connErrorf(codeFrameSize, "PING of %d bytes", len(p))
	}
	if fh.stream != 0 {
		return connErrorf(codeProtocol, "PING on stream %d", fh.stream)
	}
	if fh.has(flagAck) {
		c.mu.Lock()
		c.pingOut = false
		c.mu.Unlock()
		return nil
	}
	now := time.Now()
	c.mu.Lock()
	responded := c.responded
	c.responded = false
	c.mu.Unlock()
	switch {
	case responded:
		c.strikes = 0
	case !c.clientPing.IsZero() && now.Sub(c.clientPing) < c.s.cfg.MinPingInterval:
		if c.strikes++; c.strikes > maxPingStrikes {
			return connError{code: codeEnhanceYourCalm, why: "too_many_pings"}
		}
	}
	c.clientPing = now
	c.mu.Lock()
	c.out = appendPing(c.out, true, [8]byte(p))
	c.mu.Unlock()
	c.flushHere()
	return nil
}

const maxPingStrikes = 2

func (c *conn) onWindowUpdate(fh frameHeader, p []byte) error {
	if len(p) != 4 {
		return connErrorf(codeFrameSize, "WINDOW_UPDATE of %d bytes", len(p))
	}
	incr := int64(binary.BigEndian.Uint32(p) & maxWindow)
	if fh.stream == 0 {
		if incr == 0 {
			return connErrorf(codeProtocol, "WINDOW_UPDATE of 0")
		}
		c.mu.Lock()
		c.sendAvail += incr
		if c.sendAvail > maxWindow {
			c.mu.Unlock()
			return connErrorf(codeFlowControl, "connection window past 2^31-1")
		}
		c.pumpAll()
		c.mu.Unlock()
		c.flushHere()
		return nil
	}
	st := c.stream(fh.stream)
	if st == nil {
		return nil
	}
	if incr == 0 {
		st.fail(codeProtocol, status.Error(codes.Internal, "wire: WINDOW_UPDATE of 0"))
		return nil
	}
	c.mu.Lock()
	st.sendAvail += incr
	over := st.sendAvail > maxWindow
	if !over {
		c.pump(st)
	}
	c.mu.Unlock()
	if over {
		st.fail(codeFlowControl, status.Error(codes.Internal, "wire: stream window past 2^31-1"))
		return nil
	}
	c.flushHere()
	return nil
}

// pump moves what st has queued into DATA frames, as far as both windows
// allow, and its trailers after them. Caller holds c.mu.
func (c *conn) pump(st *Stream) {
	for len(st.sendq) > 0 {
		n := int(min(int64(len(st.sendq)), c.sendAvail, st.sendAvail, int64(c.peerFrame)))
		if n <= 0 {
			return
		}
		c.out = appendData(c.out, st.id, st.sendq[:n], false)
		c.responded = true
		st.sendq = st.sendq[n:]
		c.sendAvail -= int64(n)
		st.sendAvail -= int64(n)
	}
	st.sendq = nil
	if st.trailers == nil {
		return
	}
	c.out = appendHeaders(c.out, st.id, st.trailers, true, c.peerFrame)
	c.responded = true
	st.trailers = nil
	if st.rst {
		// The client has not ended its side: the stream is over for it
		// too (as grpc-go does).
		c.out = appendRSTStream(c.out, st.id, codeNo)
	}
	delete(c.streams, st.id)
}

// pumpAll pumps every stream with something queued. Caller holds c.mu.
func (c *conn) pumpAll() {
	for _, st := range c.streams {
		if len(st.sendq) > 0 || st.trailers != nil {
			c.pump(st)
		}
	}
}

// flushHere writes what is queued on the calling goroutine, unless a
// writer runs already. The connection's own goroutine may block in it.
func (c *conn) flushHere() { c.write(false) }

// kick starts a writer goroutine for what is queued, unless one runs: a
// goroutine that must not block on the socket (another connection's, the
// server's) queues and kicks.
func (c *conn) kick() { c.write(true) }

// write becomes the writer of what is queued, unless a writer runs: on a
// goroutine of its own with async, else on the caller's.
func (c *conn) write(async bool) {
	c.mu.Lock()
	if c.writing || c.closed || !c.queued() {
		c.mu.Unlock()
		return
	}
	c.writing = true
	c.mu.Unlock()
	if async && c.pfd.Load() == nil {
		go c.flush()
	} else {
		c.flush() // a polled connection's writes never wait
	}
}

// flush writes until nothing is queued; the caller set c.writing. An
// idle connection keeps no write buffer.
func (c *conn) flush() {
	for {
		c.mu.Lock()
		if c.closed || !c.queued() {
			c.writing = false
			closeNow := c.goingAway && !c.queued() && len(c.streams) == 0
			c.mu.Unlock()
			if closeNow {
				c.close(nil)
			}
			return
		}
		buf := c.out
		c.out = nil
		events := c.wevents
		pfd := c.pfd.Load()
		c.mu.Unlock()
		if pfd == nil {
			c.rw.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
			if _, err := c.rw.Write(buf); err != nil {
				c.close(err)
				return
			}
			continue
		}
		rest, err := c.writePolled(pfd, buf)
		if err == errWouldBlock {
			// The socket is full: the poller's word that it has room
			// again (writable) resumes the writing, unless it came
			// already.
			c.mu.Lock()
			if c.sock != nil {
				c.sock.unwrite(rest)
			} else {
				c.out = append(rest[:len(rest):len(rest)], c.out...)
			}
			if c.wevents == events && !c.closed {
				c.wblocked, c.wblockedAt = true, time.Now()
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			continue
		}
		if err != nil {
			c.close(err)
			return
		}
	}
}

// queued says whether something waits to be written. Caller holds c.mu.
func (c *conn) queued() bool {
	return len(c.out) > 0 || c.sock != nil && c.sock.pending()
}

// writePolled writes the frames b to a polled connection's socket, as
// far as it takes them now (sealed first, over TLS, after the records
// waiting): what is left (ciphertext over TLS) is rest, with
// errWouldBlock.
func (c *conn) writePolled(pfd *pollFD, b []byte) (rest []byte, err error) {
	if c.sock != nil {
		if b, err = c.sock.seal(c.tlsrw, b); err != nil {
			return nil, err
		}
	}
	n, err := pfd.write(b)
	return b[n:], err
}

// writable is the poller's word that c's socket has room again.
func (c *conn) writable() {
	c.mu.Lock()
	c.wevents++
	resume := c.wblocked
	c.wblocked = false
	c.mu.Unlock()
	if resume {
		go c.flush()
	}
}

// queue appends frames (by fn) to what is written next and starts a
// writer; nothing is queued on a closed connection.
func (c *conn) queue(fn func(b []byte) []byte) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.out = fn(c.out)
	c.mu.Unlock()
	c.kick()
}

// close ends the connection and every stream on it; err is why (nil: it
// ended as it should).
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	streams := make([]*Stream, 0, len(c.streams))
	for _, st := range c.streams {
		if !st.ended {
			st.ended = true
			streams = append(streams, st)
		}
	}
	c.streams = nil
	c.out = nil
	pfd := c.pfd.Load()
	c.mu.Unlock()
	if pfd != nil {
		c.s.poller.remove(c)
		defer c.gone()
	} else {
		c.nc.Close()
	}
	why := status.New(codes.Unavailable, "wire: the connection closed")
	if errors.Is(err, errShutdown) {
		why = status.New(codes.Unavailable, "wire: server shutting down")
	} else if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		why = status.Newf(codes.Unavailable, "wire: the connection failed: %v", err)
	}
	for _, st := range streams {
		st.finish(why.Err())
	}
}

// goAway ends every stream with st, says GOAWAY and closes the
// connection once what is queued is written (Server.Shutdown).
func (c *conn) goAway(st *status.Status) {
	c.mu.Lock()
	if !c.served {
		c.mu.Unlock()
		c.close(errShutdown)
		return
	}
	c.goingAway = true
	streams := make([]*Stream, 0, len(c.streams))
	for _, s := range c.streams {
		streams = append(streams, s)
	}
	c.mu.Unlock()
	for _, s := range streams {
		s.End(st.Err())
	}
	c.queue(func(b []byte) []byte { return appendGoAway(b, c.lastStream.Load(), codeNo, "server shutting down") })
	c.mu.Lock()
	idle := !c.writing && !c.queued() && len(c.streams) == 0
	c.mu.Unlock()
	if idle {
		c.close(nil)
	}
}

// pingData marks the server's keepalive pings.
var pingData = [8]byte{'r', 'u', 'n', 'n', 'e', 'l', 'k', 'a'}

// keepalive pings the connection when it has been silent for
// KeepaliveTime, and closes it when it stays silent KeepaliveTimeout after
// the ping (the sweep calls it).
func (c *conn) keepalive(now time.Time) {
	last := time.Unix(0, c.lastRead.Load())
	c.mu.Lock()
	if c.closed || !c.served {
		c.mu.Unlock()
		return
	}
	if c.wblocked && now.Sub(c.wblockedAt) > c.s.cfg.WriteTimeout {
		c.mu.Unlock()
		c.close(errWriteTimeout)
		return
	}
	if c.pingOut {
		if last.After(c.pingAt) {
			c.pingOut = false // anything read answers it
		} else if now.Sub(c.pingAt) > c.s.cfg.KeepaliveTimeout {
			c.mu.Unlock()
			c.close(errKeepalive)
			return
		}
		c.mu.Unlock()
		return
	}
	if now.Sub(last) < c.s.cfg.KeepaliveTime {
		c.mu.Unlock()
		return
	}
	c.pingOut, c.pingAt = true, now
	c.out = appendPing(c.out, false, pingData)
	c.mu.Unlock()
	c.kick()
}
