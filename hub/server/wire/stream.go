package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Handler serves the streams of one method.
type Handler interface {
	// Open starts a stream, on its connection's goroutine: the stream's
	// Context has the request's metadata and the peer. It returns what
	// receives the stream's messages, or an error whose status ends the
	// stream at once.
	Open(st *Stream) (Receiver, error)
}

// Receiver takes one stream's requests. Message and CloseSend run on the
// connection's goroutine, in the order the client sent them: while one
// runs, nothing else of the connection is read, so they must not block
// for long (a slow one holds back only its own connection, which is the
// back-pressure a client meets). Closed runs once, last: on whichever
// goroutine ended the stream (inside End), or, when the stream ended
// while Message or CloseSend ran, on the connection's goroutine after it
// returned; never beside them.
type Receiver interface {
	// Message is one request message, decompressed; the receiver may keep
	// it. An error ends the stream with its status.
	Message(m []byte) error
	// CloseSend says the client sent its last message.
	CloseSend()
	// Closed says the stream ended: err is what End was given, or why it
	// ended otherwise (reset by the client: Canceled; the connection
	// lost or the server shutting down: Unavailable).
	Closed(err error)
}

// Stream is one gRPC stream served here.
type Stream struct {
	c   *conn
	id  uint32
	req request // its metadata only until Open returns
	rcv Receiver

	// The connection's goroutine only: the message being gathered.
	prefix    [msgPrefixLen]byte
	prefixN   int
	msgLen    int
	msg       []byte
	failed    bool // ended: the rest of its DATA is dropped
	recvAvail int64
	// recvUnacked is what it received and handled, not yet granted again.
	recvUnacked uint32

	// Under c.mu.
	sendAvail    int64
	sendq        []byte // framed messages not yet in DATA frames
	trailers     []byte // the end's header block, once sendq is out
	rst          bool   // RST_STREAM(NO_ERROR) after the trailers
	headersSent  bool
	ended        bool
	remoteClosed bool
	finished     bool          // finish ran
	finishErr    error         // what it was given
	busy         bool          // Message or CloseSend runs
	closeDue     bool          // Closed waits for them
	done         chan struct{} // Context's Done, made when asked for
	afters       []func()      // Context's AfterFunc callbacks
}

func newStream(c *conn, id uint32) *Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &Stream{c: c, id: id, recvAvail: int64(c.s.cfg.StreamWindow), sendAvail: c.peerWindow}
}

// Context is the stream's: it ends when the stream does, and has the
// peer (with its TLS state) among its values. It is the stream itself,
// not a context made for it: a stream costs the contexts of an idle edge
// nothing more (context.AfterFunc on it takes no goroutine: it has an
// AfterFunc method).
func (st *Stream) Context() context.Context { return (*streamContext)(st) }

// Header is the request's metadata (lower-case keys, binary ones
// decoded), while Open runs; nil after.
func (st *Stream) Header() metadata.MD { return st.req.md }

// Method is the stream's full method name.
func (st *Stream) Method() string { return st.req.method }

// ErrStreamEnded is what Send says of a stream that ended.
var ErrStreamEnded = errors.New("wire: the stream has ended")

// Send queues a response message: it is written as the client's flow
// control allows, by a goroutine of the connection, so Send never waits
// for the client. A stream holding more than MaxQueued bytes the client
// has not taken ends with ResourceExhausted.
func (st *Stream) Send(m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return status.Errorf(codes.Internal, "wire: marshal %T: %v", m, err)
	}
	c := st.c
	c.mu.Lock()
	switch {
	case st.ended || c.closed:
		c.mu.Unlock()
		return ErrStreamEnded
	case len(st.sendq)+msgPrefixLen+len(b) > c.s.cfg.MaxQueued:
		c.mu.Unlock()
		err := status.Errorf(codes.ResourceExhausted, "wire: the client has not taken %d bytes of responses", len(st.sendq))
		st.End(err)
		return err
	}
	if !st.headersSent {
		st.headersSent = true
		c.out = appendHeaders(c.out, st.id, responseHeaders, false, c.peerFrame)
	}
	var pre [msgPrefixLen]byte
	binary.BigEndian.PutUint32(pre[1:], uint32(len(b)))
	st.sendq = append(append(st.sendq, pre[:]...), b...)
	c.pump(st)
	c.mu.Unlock()
	c.kick()
	return nil
}

// End ends the stream with err's status (nil: OK): the trailers follow
// the messages queued before. The client gets no more messages, and the
// receiver's Closed runs with err. Ending an ended stream does nothing.
func (st *Stream) End(err error) {
	c := st.c
	c.mu.Lock()
	if st.ended {
		c.mu.Unlock()
		return
	}
	st.ended = true
	if !c.closed {
		s, _ := status.FromError(err)
		st.trailers = trailerBlock(s, !st.headersSent)
		st.headersSent = true
		st.rst = !st.remoteClosed
		c.pump(st)
	}
	c.mu.Unlock()
	c.kick()
	st.finish(err)
}

// fail ends the stream for an error of its own (RFC 9113 section 5.4.2):
// RST_STREAM with code, and the receiver's Closed with err.
func (st *Stream) fail(code uint32, err error) { st.abort(true, code, err) }

// reset ends the stream the client reset.
func (st *Stream) reset(err error) { st.abort(false, 0, err) }

// abort ends the stream at once, what it queued dropped, with an
// RST_STREAM of code when rst; the receiver hears err, unless the stream
// had ended already.
func (st *Stream) abort(rst bool, code uint32, err error) {
	c := st.c
	c.mu.Lock()
	delete(c.streams, st.id)
	st.sendq, st.trailers = nil, nil
	if rst {
		c.out = appendRSTStream(c.out, st.id, code)
	}
	ended := st.ended
	st.ended = true
	c.mu.Unlock()
	if rst {
		c.kick()
	}
	st.failed = true
	if !ended {
		st.finish(err)
	}
}

// finish runs once the stream ended: its context ends and its receiver
// hears why, now or, while it is busy, once it is done.
func (st *Stream) finish(err error) {
	c := st.c
	c.mu.Lock()
	if st.finished {
		c.mu.Unlock()
		return
	}
	st.finished, st.finishErr = true, err
	rcv, busy := st.rcv, st.busy
	if busy {
		st.closeDue = true
	}
	c.mu.Unlock()
	st.endContext()
	if rcv != nil && !busy {
		rcv.Closed(err)
	}
}

// receive runs fn (the receiver's Message or CloseSend) unless the stream
// has ended; a Closed due while it ran runs after it.
func (st *Stream) receive(fn func()) {
	c := st.c
	c.mu.Lock()
	if st.ended || st.finished || st.rcv == nil {
		c.mu.Unlock()
		return
	}
	st.busy = true
	c.mu.Unlock()
	c.s.call(c, fn)
	c.mu.Lock()
	st.busy = false
	due, err := st.closeDue, st.finishErr
	st.closeDue = false
	c.mu.Unlock()
	if due {
		st.rcv.Closed(err)
	}
}

// opened gives the stream the receiver Open returned; one whose stream
// ended while it opened (Shutdown) hears Closed at once.
func (st *Stream) opened(rcv Receiver) {
	c := st.c
	c.mu.Lock()
	st.rcv = rcv
	late, err := st.finished, st.finishErr
	c.mu.Unlock()
	if late {
		rcv.Closed(err)
	}
}

// remoteDone reports whether the client has ended its side.
func (st *Stream) remoteDone() bool {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.remoteClosed
}

// remoteClose is the client's END_STREAM.
func (st *Stream) remoteClose() {
	c := st.c
	c.mu.Lock()
	st.remoteClosed = true
	ended := st.ended
	c.mu.Unlock()
	switch {
	case ended:
	case st.prefixN > 0:
		st.End(status.Error(codes.Internal, "wire: the client ended the stream inside a message"))
	default:
		st.receive(st.closeSend)
	}
}

// take reads n bytes of DATA from the connection into the message being
// gathered, and hands each complete message to the receiver. After the
// stream ended, the bytes are read and dropped.
func (st *Stream) take(n int) error {
	c := st.c
	limit := c.s.cfg.MaxRecvMsgSize
	for n > 0 {
		if st.failed || st.isEnded() {
			st.failed = true
			return c.discard(n)
		}
		if st.prefixN < msgPrefixLen {
			k := min(n, msgPrefixLen-st.prefixN)
			if err := c.readFull(st.prefix[st.prefixN : st.prefixN+k]); err != nil {
				return err
			}
			st.prefixN += k
			n -= k
			if st.prefixN < msgPrefixLen {
				continue
			}
			st.msgLen = int(binary.BigEndian.Uint32(st.prefix[1:]))
			if st.msgLen > limit {
				st.failed = true
				st.End(status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", st.msgLen, limit))
				continue
			}
			// Grown as the bytes come, not at once: a client announces
			// what it likes.
			st.msg = make([]byte, 0, min(st.msgLen, 32<<10))
		} else {
			k := min(n, st.msgLen-len(st.msg))
			at := len(st.msg)
			st.msg = append(st.msg, make([]byte, k)...)
			if err := c.readFull(st.msg[at : at+k]); err != nil {
				return err
			}
			n -= k
		}
		if len(st.msg) == st.msgLen {
			st.deliver()
		}
	}
	return nil
}

func (st *Stream) isEnded() bool {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.ended
}

// deliver hands the gathered message to the receiver.
func (st *Stream) deliver() {
	m, flag := st.msg, st.prefix[0]
	st.prefixN, st.msgLen, st.msg = 0, 0, nil
	var err error
	switch {
	case flag > 1:
		err = status.Errorf(codes.Internal, "grpc: a message with compressed flag %d", flag)
	case flag == 1 && st.req.encoding == "":
		err = status.Error(codes.Internal, "grpc: a compressed message on a stream without grpc-encoding")
	case flag == 1:
		m, err = decompress(st.req.encoding, m, st.c.s.cfg.MaxRecvMsgSize)
	}
	if err == nil {
		st.receive(func() { err = st.rcv.Message(m) })
	}
	if err != nil {
		st.failed = true
		st.End(err)
	}
}

func (st *Stream) closeSend() { st.rcv.CloseSend() }

// streamContext is a Stream as its context.Context.
type streamContext Stream

func (*streamContext) Deadline() (time.Time, bool) { return time.Time{}, false }

// closedChan is the Done of a stream that ended before it was asked for.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (x *streamContext) Done() <-chan struct{} {
	st := (*Stream)(x)
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if st.done == nil {
		if st.finished {
			return closedChan
		}
		st.done = make(chan struct{})
	}
	return st.done
}

func (x *streamContext) Err() error {
	st := (*Stream)(x)
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if st.finished {
		return context.Canceled
	}
	return nil
}

// Value is the connection's values: the peer.
func (x *streamContext) Value(key any) any { return (*Stream)(x).c.base.Value(key) }

// AfterFunc runs f in a goroutine of its own once the stream ended (at
// once if it has); stop unregisters it, reporting whether it did so
// before f was started.
func (x *streamContext) AfterFunc(f func()) (stop func() bool) {
	st := (*Stream)(x)
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.finished {
		go f()
		return func() bool { return false }
	}
	i := len(st.afters)
	st.afters = append(st.afters, f)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if st.finished || st.afters[i] == nil {
			return false
		}
		st.afters[i] = nil
		return true
	}
}

func (x *streamContext) String() string { return "wire stream context" }

// endContext closes Done and starts the AfterFunc callbacks; finish
// calls it once.
func (st *Stream) endContext() {
	c := st.c
	c.mu.Lock()
	done, afters := st.done, st.afters
	st.afters = nil
	c.mu.Unlock()
	if done != nil {
		close(done)
	}
	for _, f := range afters {
		if f != nil {
			go f()
		}
	}
}
