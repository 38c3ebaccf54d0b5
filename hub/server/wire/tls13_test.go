package wire

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// tlsPair is a TLS server configuration and a client's that trusts it,
// for tests that need TLS in every run.
func tlsPair(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	if serverTLS != nil {
		return serverTLS, clientTLS
	}
	prevS, prevC := serverTLS, clientTLS
	if err := SetTLS(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	server, client = serverTLS, clientTLS
	serverTLS, clientTLS = prevS, prevC
	return server, client
}

// takenOver returns the records of the server's only connection, once
// they took it over.
func takenOver(t *testing.T, s *Server) *tlsRecords {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		var r *tlsRecords
		for c := range s.conns {
			if s.stats.TLSRecords > 0 {
				r, _ = c.rw.(*tlsRecords)
			}
		}
		s.mu.Unlock()
		if r != nil {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection taken over by the record layer in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// echo sends a message on stream 1 and waits for its answer.
func echo(t *testing.T, r *rawClient, v string) {
	t.Helper()
	r.write(message(1, []byte(v), false))
	if f := r.waitFor(frameData); !bytes.Contains(f.p, []byte(v)) {
		t.Fatalf("answer %q, want %q in it", f.p, v)
	}
}

// dialTakenOver starts a TLS server, connects a crypto/tls client (the
// reference) that opens a stream and sends a message, and returns the
// client, the server's records once they took the connection over, and
// their write secret then.
func dialTakenOver(t *testing.T) (*rawClient, *tlsRecords, []byte) {
	t.Helper()
	stls, ctls := tlsPair(t)
	s, addr := startRaw(t, Config{TLS: stls})
	nc, err := tls.Dial("tcp", addr, ctls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	r := newRawClient(t, nc)
	r.open(1)
	echo(t, r, "first")
	rec := takenOver(t, s)
	rec.wmu.Lock()
	defer rec.wmu.Unlock()
	return r, rec, rec.out.secret
}

// TestTLSKeyUpdate: the server's KeyUpdate asking for the client's (a
// crypto/tls client, the reference) moves both directions to their
// next keys, and what follows still goes through both ways.
func TestTLSKeyUpdate(t *testing.T) {
	r, rec, out0 := dialTakenOver(t)
	if err := rec.keyUpdate(true); err != nil {
		t.Fatal(err)
	}
	echo(t, r, "two") // the answer follows the KeyUpdate
	echo(t, r, "three")
	echo(t, r, "four")
	rec.wmu.Lock()
	out1 := rec.out.secret
	rec.wmu.Unlock()
	if bytes.Equal(out0, out1) {
		t.Error("the server's write key did not move")
	}
	// The client's answer to the KeyUpdate came before "three": the
	// server read it with its next read key.
	if got := rec.keyUpdatesIn.Load(); got != 1 {
		t.Errorf("the server's read key moved %d times, want 1", got)
	}
}

// TestTLSKeyUpdateAfter: the server updates its key after
// keyUpdateAfter records on its own, and the client reads on.
func TestTLSKeyUpdateAfter(t *testing.T) {
	defer func(n uint64) { keyUpdateAfter = n }(keyUpdateAfter)
	keyUpdateAfter = 3
	r, rec, out0 := dialTakenOver(t)
	for i := range 20 {
		echo(t, r, fmt.Sprint("message ", i))
	}
	rec.wmu.Lock()
	defer rec.wmu.Unlock()
	if bytes.Equal(out0, rec.out.secret) || rec.out.seq > keyUpdateAfter {
		t.Errorf("write key not updated every %d records (sequence %d)", keyUpdateAfter, rec.out.seq)
	}
}

// TestTLS12: a TLS 1.2 connection stays crypto/tls's, and is served.
func TestTLS12(t *testing.T) {
	stls, ctls := tlsPair(t)
	s, addr := startRaw(t, Config{TLS: stls})
	c := ctls.Clone()
	c.MaxVersion = tls.VersionTLS12
	nc, err := tls.Dial("tcp", addr, c)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r := newRawClient(t, nc)
	r.open(1)
	echo(t, r, "one")
	echo(t, r, "two")
	if n := s.Stats().TLSRecords; n != 0 {
		t.Errorf("%d connections taken over, want 0 (TLS 1.2)", n)
	}
}

// memConn is a socket of bytes: what it reads, what was written.
type memConn struct {
	net.Conn
	in  io.Reader
	out bytes.Buffer
}

func (m *memConn) Read(p []byte) (int, error)  { return m.in.Read(p) }
func (m *memConn) Write(p []byte) (int, error) { return m.out.Write(p) }

// recordPair is a writer's records and a reader's over the same key:
// what w seals, r opens once its socket reads it.
func recordPair(t testing.TB, suite uint16, in io.Reader) (w, r *tlsRecords, wout *bytes.Buffer) {
	secret := bytes.Repeat([]byte{7}, 48)
	mk := func(in io.Reader) (*tlsRecords, *memConn) {
		m := &memConn{in: in}
		sock := &tlsSocket{Conn: m, c: &conn{}}
		rec := &tlsRecords{Conn: sock, sock: sock}
		st := suiteTLS13(suite)
		if err := rec.in.set(st, secret, 0); err != nil {
			t.Fatal(err)
		}
		if err := rec.out.set(st, secret, 0); err != nil {
			t.Fatal(err)
		}
		return rec, m
	}
	w, wm := mk(bytes.NewReader(nil))
	r, _ = mk(in)
	return w, r, &wm.out
}

var suites = []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_AES_256_GCM_SHA384, tls.TLS_CHACHA20_POLY1305_SHA256}

// TestRecordsRoundTrip: what the records seal they open, in every
// suite, across record sizes and reads of any length, a KeyUpdate
// between; a flipped byte does not open; a close_notify is EOF.
func TestRecordsRoundTrip(t *testing.T) {
	for _, suite := range suites {
		t.Run(tls.CipherSuiteName(suite), func(t *testing.T) {
			var stream bytes.Buffer
			w, r, wout := recordPair(t, suite, &stream)
			var want []byte
			for i, n := range []int{1, 100, maxPlaintext - 1, maxPlaintext, maxPlaintext + 1, 3*maxPlaintext + 7} {
				b := bytes.Repeat([]byte{byte(i + 1)}, n)
				want = append(want, b...)
				if _, err := w.Write(b); err != nil {
					t.Fatal(err)
				}
				if i == 2 {
					if err := w.keyUpdate(false); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := w.writeRecords(recordTypeAlert, []byte{1, 0}); err != nil {
				t.Fatal(err)
			}
			sealed := bytes.Clone(wout.Bytes())
			stream.Write(sealed)
			got, err := io.ReadAll(shortReader{r, 977})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("opened %d bytes, want %d", len(got), len(want))
			}
			if r.buf != nil {
				t.Error("a buffer held after everything was read")
			}
			for _, at := range []int{0, 3, 4, 5, 20, len(sealed) / 2} {
				bad := bytes.Clone(sealed)
				bad[at] ^= 0x40
				var s2 bytes.Buffer
				_, r2, _ := recordPair(t, suite, &s2)
				s2.Write(bad)
				if _, err := io.ReadAll(r2); err == nil {
					t.Errorf("byte %d flipped: read without an error", at)
				}
			}
		})
	}
}

// TestRecordsOverflow: a record whose plaintext is longer than 2^14
// bytes and its content type is refused (record_overflow), though its
// ciphertext is within 2^14+256.
func TestRecordsOverflow(t *testing.T) {
	var stream bytes.Buffer
	w, r, _ := recordPair(t, tls.TLS_AES_128_GCM_SHA256, &stream)
	inner := append(bytes.Repeat([]byte{'x'}, maxPlaintext+1), recordTypeAppData)
	hdr := []byte{recordTypeAppData, 3, 3, 0, 0}
	binary.BigEndian.PutUint16(hdr[3:], uint16(len(inner)+w.out.aead.Overhead()))
	nonce := w.out.nonce()
	stream.Write(hdr)
	stream.Write(w.out.aead.Seal(nil, nonce[:], inner, hdr))
	if _, err := io.ReadAll(r); !errors.Is(err, errRecordOverflow) {
		t.Fatalf("read %v, want record_overflow", err)
	}
}

// shortReader reads at most n bytes a call.
type shortReader struct {
	r io.Reader
	n int
}

func (o shortReader) Read(p []byte) (int, error) {
	return o.r.Read(p[:min(len(p), o.n)])
}

// FuzzRecords: the record reader takes any stream, sealed records
// mutated above all, without panicking or looping.
func FuzzRecords(f *testing.F) {
	for _, suite := range suites {
		w, _, wout := recordPair(f, suite, nil)
		w.Write([]byte("hello"))
		w.keyUpdate(true)
		w.Write(bytes.Repeat([]byte("x"), 300))
		w.writeRecords(recordTypeAlert, []byte{1, 0})
		f.Add(uint8(suite&3), wout.Bytes())
	}
	f.Add(uint8(1), []byte{23, 3, 3, 0, 0})
	f.Add(uint8(1), []byte{23, 3, 3, 0xff, 0xff})
	f.Add(uint8(1), []byte{22, 3, 3, 0, 1, 0})
	f.Fuzz(func(t *testing.T, which uint8, stream []byte) {
		suite := suites[int(which)%len(suites)]
		_, r, _ := recordPair(t, suite, bytes.NewReader(stream))
		buf := make([]byte, 1000)
		for range 1000 {
			n, err := r.Read(buf)
			if n < 0 || n > len(buf) {
				t.Fatalf("Read returned %d", n)
			}
			if err != nil {
				return
			}
		}
	})
}
