package wire

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
)

// tlsSocket is what a TLS connection's tls.Conn reads and writes: the
// socket's net.Conn until the poller serves the connection, then its
// pollFD. So a TLS connection leaves its goroutine as a plaintext one
// does:
//
//   - A read that finds the socket empty returns errPollAgain, a
//     temporary net.Error: crypto/tls keeps no temporary error (its
//     readRecordOrCCS), and the part of a record read so far waits in
//     the tls.Conn for the poller's next event.
//   - A write appends the sealed record to out, which the connection's
//     writer (flush) takes and writes without waiting, as it writes a
//     plaintext connection's frames.
type tlsSocket struct {
	net.Conn
	c *conn

	// drained: a read since the poller's last event found the socket
	// empty, or took less than it had room for (the socket's next bytes
	// are the poller's next event: its set is edge-triggered). The
	// reader's alone.
	drained bool

	mu  sync.Mutex
	out []byte // sealed records not written yet
}

// errPollAgain is a polled TLS connection's "nothing more to read now".
var errPollAgain net.Error = pollAgain{}

type pollAgain struct{}

func (pollAgain) Error() string   { return "wire: nothing more to read until the poller's next event" }
func (pollAgain) Timeout() bool   { return false }
func (pollAgain) Temporary() bool { return true }

func (s *tlsSocket) Read(p []byte) (int, error) {
	f := s.c.pfd.Load()
	if f == nil {
		return s.Conn.Read(p)
	}
	if s.drained {
		return 0, errPollAgain
	}
	n, err := f.read(p)
	switch {
	case err == errWouldBlock:
		s.drained = true
		return 0, errPollAgain
	case err != nil:
		return 0, err
	case n == 0:
		return 0, io.EOF
	}
	s.drained = n < len(p)
	return n, nil
}

func (s *tlsSocket) Write(p []byte) (int, error) {
	if s.c.pfd.Load() == nil {
		return s.Conn.Write(p)
	}
	s.mu.Lock()
	s.out = append(s.out, p...)
	s.mu.Unlock()
	return len(p), nil
}

// pending says whether sealed records wait to be written.
func (s *tlsSocket) pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.out) > 0
}

// seal seals p (if any) after the records waiting, and returns them all
// for the writer to write: what it cannot write goes back (unwrite).
func (s *tlsSocket) seal(tc *tls.Conn, p []byte) ([]byte, error) {
	if len(p) > 0 {
		if _, err := tc.Write(p); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	b := s.out
	s.out = nil
	s.mu.Unlock()
	return b, nil
}

// unwrite puts back b, not written, before what was sealed since.
func (s *tlsSocket) unwrite(b []byte) {
	s.mu.Lock()
	s.out = append(b[:len(b):len(b)], s.out...)
	s.mu.Unlock()
}
