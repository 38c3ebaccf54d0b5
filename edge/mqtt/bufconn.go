package mqtt

import (
	"bufio"
	"net"
	"sync"
)

// bufConn is the connection paho reads and writes. Reads go through a
// buffer: paho reads a packet a few bytes at a time (type, length bytes,
// body), which on a bare socket is a syscall each. Writes are collected per
// packet (paho holds the connection's Locker for a packet's writes) and go
// out as one write when the packet is complete — or, while corked, when
// the cork is released, so that a run of acknowledgements is one syscall
// instead of one each.
type bufConn struct {
	net.Conn
	r *bufio.Reader

	mu     sync.Mutex // held by paho for each packet (sync.Locker), and by cork/uncork
	buf    []byte
	corked int
	err    error // sticky write error: the connection is closed
}

func newBufConn(c net.Conn) *bufConn {
	return &bufConn{Conn: c, r: bufio.NewReaderSize(c, 32<<10)}
}

// Read is called by paho's single reader goroutine only.
func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

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

func (c *bufConn) flush() {
	if len(c.buf) == 0 || c.err != nil {
		c.buf = c.buf[:0]
		return
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	if err != nil {
		// paho's reader sees the closed connection and reconnects; the
		// broker redelivers what was not acknowledged.
		c.err = err
		c.Conn.Close()
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
