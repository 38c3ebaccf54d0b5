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

	// Until the connection is taken over or left to the tls.Conn
	// (takeOver, handOff), reads stop at the end of the record being
	// read, so that the tls.Conn holds no part of a record it has not
	// handled; the records read and written after the handshake are
	// counted (the sequence numbers the record layer goes on from).
	keys       *tlsKeys // the key log; nil once not needed
	limit      bool
	handshaken bool
	stop       bool          // reads answer errPollAgain (takeOver)
	rin, rout  recordCounter // the reader's, the writers' (under mu)
	recordsIn  uint64
	recordsOut uint64

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
	if s.stop {
		return 0, errPollAgain
	}
	if s.limit {
		p = p[:min(len(p), s.rin.room())]
		n, err := s.read(p)
		if s.rin.count(p[:n]) > 0 && s.handshaken {
			s.recordsIn++ // one record at most: p ends at its end
		}
		return n, err
	}
	return s.read(p)
}

func (s *tlsSocket) read(p []byte) (int, error) {
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
	s.mu.Lock()
	if s.limit {
		if n := s.rout.count(p); s.handshaken {
			s.recordsOut += uint64(n)
		}
	}
	if s.c.pfd.Load() == nil {
		s.mu.Unlock()
		return s.Conn.Write(p)
	}
	s.out = append(s.out, p...)
	s.mu.Unlock()
	return len(p), nil
}

// recordCounter follows the record boundaries in a stream of TLS
// records.
type recordCounter struct {
	hdr  [recordHeaderLen]byte
	hdrN int // bytes of the header seen; recordHeaderLen once in a body
	left int // bytes of the body to come
}

// room is how much of the stream belongs to the record being read: the
// rest of its header, or of its body.
func (rc *recordCounter) room() int {
	if rc.hdrN < recordHeaderLen {
		return recordHeaderLen - rc.hdrN
	}
	return rc.left
}

// count follows b and returns how many records it ended.
func (rc *recordCounter) count(b []byte) int {
	ended := 0
	for len(b) > 0 {
		if rc.hdrN < recordHeaderLen {
			n := copy(rc.hdr[rc.hdrN:], b)
			rc.hdrN += n
			b = b[n:]
			if rc.hdrN < recordHeaderLen {
				break
			}
			rc.left = int(rc.hdr[3])<<8 | int(rc.hdr[4])
		} else {
			n := min(len(b), rc.left)
			rc.left -= n
			b = b[n:]
		}
		if rc.left == 0 {
			rc.hdrN = 0
			ended++
		}
	}
	return ended
}

// between says whether the stream is at a record boundary.
func (rc *recordCounter) between() bool { return rc.hdrN == 0 }

// takeOver hands a connection that crypto/tls has handshaken, and read
// and written through s since, to the record layer of its own
// (tlsRecords), when it can: TLS 1.3, a cipher suite it knows, both
// traffic secrets logged, and no record partly read or written. It
// returns the application data the tls.Conn had opened and not handed
// on, which comes before anything the records read; nil records when it
// leaves the connection to the tls.Conn (always, for a nil tc: a
// connection handed off). Either way s stops following records.
func (s *tlsSocket) takeOver(tc *tls.Conn) (*tlsRecords, []byte, error) {
	keys := s.keys
	s.keys = nil
	s.mu.Lock()
	s.limit = false
	whole := s.rout.between()
	s.mu.Unlock()
	if tc == nil {
		return nil, nil, nil
	}
	st := tc.ConnectionState()
	suite := suiteTLS13(st.CipherSuite)
	if st.Version != tls.VersionTLS13 || suite == nil || keys == nil || keys.client == nil || keys.server == nil ||
		!s.rin.between() || !whole {
		return nil, nil, nil
	}
	var opened []byte
	s.stop = true
	var buf [512]byte
	for {
		n, err := tc.Read(buf[:])
		opened = append(opened, buf[:n]...)
		if err == errPollAgain {
			break
		}
		if err != nil {
			s.stop = false
			return nil, nil, err
		}
	}
	s.stop = false
	r := &tlsRecords{Conn: s, sock: s}
	if err := r.in.set(suite, keys.client, s.recordsIn); err != nil {
		return nil, nil, err
	}
	if err := r.out.set(suite, keys.server, s.recordsOut); err != nil {
		return nil, nil, err
	}
	return r, opened, nil
}

// pending says whether sealed records wait to be written.
func (s *tlsSocket) pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.out) > 0
}

// seal seals p (if any) with w (the tls.Conn, or the records) after the
// records waiting, and returns them all for the writer to write: what
// it cannot write goes back (unwrite).
func (s *tlsSocket) seal(w io.Writer, p []byte) ([]byte, error) {
	if len(p) > 0 {
		if _, err := w.Write(p); err != nil {
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
