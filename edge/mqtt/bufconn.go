package mqtt

import (
	"net"
	"sync"
)

// bufConn is one connection to the broker, shared by the source's reader
// (wire.go) and the client library (paho.golang for v5, paho.mqtt.golang
// for v3.1.1).
//
// Reads: the source's reader owns the socket. It takes the PUBLISH and
// PUBREL packets itself and queues every other packet (CONNACK, SUBACK,
// PINGRESP, the acknowledgements of our own publishes, DISCONNECT) for the
// library, which reads them through Read as if from the socket.
//
// Writes are collected per packet (paho holds the connection's Locker for
// a packet's writes) and go out as one write when the packet is complete —
// or, while corked, when the cork is released, so that a run of
// acknowledgements is one syscall instead of one each.
type bufConn struct {
	net.Conn

	mu     sync.Mutex // held by paho for each packet (sync.Locker), and by cork/uncork
	buf    []byte
	corked int
	err    error // sticky write error: the connection is closed

	// The library's packets, queued by the reader.
	rmu   sync.Mutex
	rcond sync.Cond
	rq    []byte
	rerr  error // the reader's end: the socket failed or was closed
}

func newBufConn(c net.Conn) *bufConn {
	bc := &bufConn{Conn: c}
	bc.rcond.L = &bc.rmu
	return bc
}

// Read gives the library the packets the reader queued for it; it blocks
// until there are some or the reader has ended.
func (c *bufConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.rq) == 0 && c.rerr == nil {
		c.rcond.Wait()
	}
	if len(c.rq) == 0 {
		return 0, c.rerr
	}
	n := copy(p, c.rq)
	c.rq = c.rq[:copy(c.rq, c.rq[n:])]
	return n, nil
}

// queue hands one packet to the library.
func (c *bufConn) queue(pkt []byte) {
	c.rmu.Lock()
	c.rq = append(c.rq, pkt...)
	c.rmu.Unlock()
	c.rcond.Signal()
}

// endRead tells the library the connection has ended, once it has read
// what is queued.
func (c *bufConn) endRead(err error) {
	c.rmu.Lock()
	if c.rerr == nil {
		c.rerr = err
	}
	c.rmu.Unlock()
	c.rcond.Broadcast()
}

// Close closes the socket (which ends the reader) and ends the library's
// reads at once, even while the reader is held up in the handler.
func (c *bufConn) Close() error {
	err := c.Conn.Close()
	c.endRead(net.ErrClosed)
	return err
}

// Lock and Unlock make bufConn a sync.Locker: paho takes it around the
// writes of one packet.
func (c *bufConn) Lock() { c.mu.Lock() }

func (c *bufConn) Unlock() {
	if c.corked == 0 {
		c.flush()
	}
	c.mu.Unlock()
}

// Write appends to the pending bytes; mu must be held (paho holds it).
func (c *bufConn) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// writeShort writes one packet of the 4-byte form PUBACK, PUBREC and
// PUBCOMP take for success (both protocol versions; MQTT v5 §3.4.2.1):
// fixed header, remaining length 2, packet ID.
func (c *bufConn) writeShort(typ byte, id uint16) error {
	b := [4]byte{typ << 4, 2, byte(id >> 8), byte(id)}
	c.Lock()
	defer c.Unlock() // flushes, unless corked
	_, err := c.Write(b[:])
	return err
}

func (c *bufConn) flush() {
	if len(c.buf) == 0 || c.err != nil {
		c.buf = c.buf[:0]
		return
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	if err != nil {
		// The reader sees the closed connection and the source
		// reconnects; the broker redelivers what was not acknowledged.
		c.err = err
		c.Close()
	}
	if cap(c.buf) > 64<<10 {
		c.buf = nil
	}
}

// cork holds packets back until the matching uncork.
func (c *bufConn) cork() {
	c.mu.Lock()
	c.corked++
	c.mu.Unlock()
}

func (c *bufConn) uncork() {
	c.mu.Lock()
	if c.corked--; c.corked == 0 {
		c.flush()
	}
	c.mu.Unlock()
}
