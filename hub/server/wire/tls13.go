package wire

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/chacha20poly1305"
)

// tlsRecords is the record layer of an edge's TLS 1.3 connection once
// crypto/tls has done its handshake (RFC 8446 section 5): the
// connection's own, so that an idle connection holds its two AEADs and
// nothing else. A tls.Conn keeps the buffers it grew for life (its raw
// input at the size of the largest record it read, up to 16 KiB, and
// its handshake buffer at the size of the ClientHello: golang/go#43563),
// about 6.5 KB an idle edge and 17–33 KB once an edge has uploaded; the
// records hold a buffer only while a record is partly read or opened
// data waits to be taken.
//
// The handshake stays crypto/tls's. The traffic secrets come from the
// tls.Conn's key log (Config.KeyLogWriter, per connection, kept in
// process memory), the record counts from tlsSocket, which hands the
// tls.Conn one record at a time until the connection is taken over
// (takeOver). Session tickets are off for such connections, so that the
// tls.Conn writes no record with the server's application key during
// the handshake.
type tlsRecords struct {
	net.Conn // the tlsSocket: deadlines and addresses
	sock     *tlsSocket

	// The reader's alone.
	in      tlsHalf
	buf     *[recordBufSize]byte // nil when nothing is held
	start   int                  // buf[start:end] is ciphertext not opened yet
	end     int
	plain   []byte // opened application data not taken yet, in buf
	useless int    // records in a row that carried no application data
	eof     bool   // the peer's close_notify came
	// keyUpdatesIn counts the peer's KeyUpdates (for the tests).
	keyUpdatesIn atomic.Int32

	wmu sync.Mutex // seals and hands records to the socket in order
	out tlsHalf
}

// sealPool holds the buffers records are sealed into on their way to
// the socket: an idle connection keeps none.
var sealPool = sync.Pool{New: func() any { return new([]byte) }}

// Record sizes (RFC 8446 section 5.1 and 5.2).
const (
	recordHeaderLen = 5
	maxPlaintext    = 1 << 14
	maxCiphertext   = maxPlaintext + 256
	recordBufSize   = recordHeaderLen + maxCiphertext

	recordTypeAlert     = 21
	recordTypeHandshake = 22
	recordTypeAppData   = 23

	handshakeKeyUpdate = 24

	// maxUselessRecords bounds the records in a row with no application
	// data (as crypto/tls does): a peer cannot keep the reader busy.
	maxUselessRecords = 16
)

// keyUpdateAfter is how many records the server seals with one key
// before it moves to the next (a KeyUpdate): AES-GCM is safe for about
// 2^24.5 full records a key (RFC 8446 section 5.5). A variable for the
// tests.
var keyUpdateAfter uint64 = 1 << 24

var recordPool = sync.Pool{New: func() any { return new([recordBufSize]byte) }}

// tlsSuite is what the record layer needs of a TLS 1.3 cipher suite.
type tlsSuite struct {
	hash   func() hash.Hash
	keyLen int
	aead   func(key []byte) (cipher.AEAD, error)
}

func suiteTLS13(id uint16) *tlsSuite {
	switch id {
	case tls.TLS_AES_128_GCM_SHA256:
		return &tlsSuite{sha256.New, 16, newAESGCM}
	case tls.TLS_AES_256_GCM_SHA384:
		return &tlsSuite{sha512.New384, 32, newAESGCM}
	case tls.TLS_CHACHA20_POLY1305_SHA256:
		return &tlsSuite{sha256.New, chacha20poly1305.KeySize, chacha20poly1305.New}
	}
	return nil
}

func newAESGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// expandLabel is HKDF-Expand-Label with an empty context (RFC 8446
// section 7.1).
func expandLabel(h func() hash.Hash, secret []byte, label string, length int) ([]byte, error) {
	info := make([]byte, 0, 4+len("tls13 ")+len(label))
	info = binary.BigEndian.AppendUint16(info, uint16(length))
	info = append(info, byte(len("tls13 ")+len(label)))
	info = append(info, "tls13 "...)
	info = append(info, label...)
	info = append(info, 0)
	return hkdf.Expand(h, secret, string(info), length)
}

// tlsHalf is one direction's traffic key: its AEAD, IV and the number of
// records it has protected.
type tlsHalf struct {
	suite  *tlsSuite
	secret []byte
	aead   cipher.AEAD
	iv     [12]byte
	seq    uint64
}

// set keys the half from a traffic secret, its sequence at seq.
func (h *tlsHalf) set(suite *tlsSuite, secret []byte, seq uint64) error {
	key, err := expandLabel(suite.hash, secret, "key", suite.keyLen)
	if err != nil {
		return err
	}
	iv, err := expandLabel(suite.hash, secret, "iv", len(h.iv))
	if err != nil {
		return err
	}
	aead, err := suite.aead(key)
	if err != nil {
		return err
	}
	h.suite, h.secret, h.aead, h.seq = suite, secret, aead, seq
	copy(h.iv[:], iv)
	return nil
}

// update moves the half to the next traffic secret (a KeyUpdate).
func (h *tlsHalf) update() error {
	next, err := expandLabel(h.suite.hash, h.secret, "traffic upd", h.suite.hash().Size())
	if err != nil {
		return err
	}
	return h.set(h.suite, next, 0)
}

// nonce is the per-record nonce: the IV XOR the sequence number.
func (h *tlsHalf) nonce() [12]byte {
	n := h.iv
	for i := range 8 {
		n[4+i] ^= byte(h.seq >> (56 - 8*i))
	}
	return n
}

var (
	errRecordMAC      = errors.New("wire: tls: a record did not authenticate (bad_record_mac)")
	errRecordOverflow = errors.New("wire: tls: a record longer than 2^14+256 bytes, or its plaintext than 2^14+1 (record_overflow)")
)

// Read reads application data: from what is opened already, then from
// the records read already, then from the socket (a polled one answers
// errPollAgain once it is empty, the part of a record read so far
// kept). It fills p from as many records as it holds.
func (r *tlsRecords) Read(p []byte) (int, error) {
	n := 0
	for {
		if len(r.plain) > 0 {
			m := copy(p[n:], r.plain)
			r.plain = r.plain[m:]
			n += m
			if n == len(p) {
				r.release()
				return n, nil
			}
		}
		if r.eof {
			r.release()
			if n > 0 {
				return n, nil
			}
			return 0, io.EOF
		}
		ok, err := r.open()
		if err != nil {
			return n, err
		}
		if ok {
			continue
		}
		if n > 0 {
			// Hand over what is opened before reading the socket again:
			// the caller handles it, and the socket's next read may wait.
			r.release()
			return n, nil
		}
		if err := r.fill(); err != nil {
			r.release()
			return 0, err
		}
	}
}

// open opens the next whole record held, if there is one: its
// application data goes to plain, and what it says otherwise is done.
func (r *tlsRecords) open() (bool, error) {
	if r.buf == nil || r.end-r.start < recordHeaderLen {
		return false, nil
	}
	hdr := r.buf[r.start : r.start+recordHeaderLen]
	length := int(binary.BigEndian.Uint16(hdr[3:]))
	switch {
	case hdr[0] != recordTypeAppData:
		return false, fmt.Errorf("wire: tls: a record of type %d after the handshake (unexpected_message)", hdr[0])
	case hdr[1] != 3 || hdr[2] != 3:
		return false, fmt.Errorf("wire: tls: a record of version %#04x (protocol_version)", binary.BigEndian.Uint16(hdr[1:]))
	case length > maxCiphertext:
		return false, errRecordOverflow
	case r.end-r.start < recordHeaderLen+length:
		return false, nil
	}
	body := r.buf[r.start+recordHeaderLen : r.start+recordHeaderLen+length]
	nonce := r.in.nonce()
	plain, err := r.in.aead.Open(body[:0], nonce[:], body, hdr)
	if err != nil {
		return false, errRecordMAC
	}
	r.in.seq++
	r.start += recordHeaderLen + length
	if len(plain) > maxPlaintext+1 {
		return false, errRecordOverflow
	}
	// The inner plaintext: content, its type, zeros.
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 {
		return false, errors.New("wire: tls: a record with no content type (unexpected_message)")
	}
	typ, content := plain[i], plain[:i]
	if typ == recordTypeAppData && len(content) > 0 {
		r.useless = 0
		r.plain = content
		return true, nil
	}
	if r.useless++; r.useless > maxUselessRecords {
		return false, errors.New("wire: tls: too many records in a row without application data")
	}
	switch typ {
	case recordTypeAppData:
		return true, nil
	case recordTypeAlert:
		if len(content) != 2 {
			return false, errors.New("wire: tls: a malformed alert (decode_error)")
		}
		if content[1] == 0 { // close_notify
			r.eof = true
			return true, nil
		}
		return false, fmt.Errorf("wire: tls: the peer's alert %d", content[1])
	case recordTypeHandshake:
		return true, r.handshake(content)
	}
	return false, fmt.Errorf("wire: tls: an inner content type %d (unexpected_message)", typ)
}

// handshake handles the handshake messages of one record: KeyUpdate is
// the only one a client sends after the handshake (no post-handshake
// authentication is asked for). A message split across records is
// refused.
func (r *tlsRecords) handshake(b []byte) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return errors.New("wire: tls: a handshake message split across records")
		}
		typ, n := b[0], int(b[1])<<16|int(b[2])<<8|int(b[3])
		if len(b) < 4+n {
			return errors.New("wire: tls: a handshake message split across records")
		}
		body := b[4 : 4+n]
		b = b[4+n:]
		if typ != handshakeKeyUpdate {
			return fmt.Errorf("wire: tls: a handshake message of type %d after the handshake (unexpected_message)", typ)
		}
		if n != 1 || body[0] > 1 {
			return errors.New("wire: tls: a malformed KeyUpdate (decode_error)")
		}
		if err := r.in.update(); err != nil {
			return err
		}
		r.keyUpdatesIn.Add(1)
		if body[0] == 1 { // update_requested: ours goes out, then our key moves
			if err := r.keyUpdate(false); err != nil {
				return err
			}
		}
	}
	return nil
}

// fill reads the socket after what is held, into a buffer that holds a
// whole record from its start.
func (r *tlsRecords) fill() error {
	if r.buf == nil {
		r.buf = recordPool.Get().(*[recordBufSize]byte)
		r.start, r.end = 0, 0
	}
	if r.start > 0 { // plain is empty: fill follows a record taken whole
		r.end = copy(r.buf[:], r.buf[r.start:r.end])
		r.start = 0
	}
	n, err := r.sock.Read(r.buf[r.end:])
	r.end += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	if err == io.EOF && r.end > r.start {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// release gives the buffer back when it holds nothing.
func (r *tlsRecords) release() {
	if r.buf != nil && len(r.plain) == 0 && r.start == r.end {
		recordPool.Put(r.buf)
		r.buf, r.plain, r.start, r.end = nil, nil, 0, 0
	}
}

// Write seals p into application data records and hands them to the
// socket (which writes them, or queues them for a polled connection's
// writer).
func (r *tlsRecords) Write(p []byte) (int, error) {
	if err := r.writeRecords(recordTypeAppData, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// keyUpdate sends a KeyUpdate (asking the peer to update its key too,
// with requested) and moves the write key to the next secret.
func (r *tlsRecords) keyUpdate(requested bool) error {
	msg := []byte{handshakeKeyUpdate, 0, 0, 1, 0}
	if requested {
		msg[4] = 1
	}
	return r.writeRecords(recordTypeHandshake, msg)
}

// writeRecords seals b as records of type typ and hands them to the
// socket; a KeyUpdate's moves the write key after it. A key that has
// sealed keyUpdateAfter records is updated first.
func (r *tlsRecords) writeRecords(typ byte, b []byte) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	sp := sealPool.Get().(*[]byte)
	out := (*sp)[:0]
	if r.out.seq >= keyUpdateAfter && typ == recordTypeAppData {
		out = r.seal(out, recordTypeHandshake, []byte{handshakeKeyUpdate, 0, 0, 1, 0})
		if err := r.out.update(); err != nil {
			return err
		}
	}
	out = r.seal(out, typ, b)
	_, err := r.sock.Write(out) // which copies it, or writes it whole
	if cap(out) <= recordBufSize {
		*sp = out[:0]
		sealPool.Put(sp) // a bigger write's buffer is not kept
	}
	if err != nil {
		return err
	}
	if typ == recordTypeHandshake && b[0] == handshakeKeyUpdate {
		return r.out.update()
	}
	return nil
}

// seal appends b sealed as records of type typ to out.
func (r *tlsRecords) seal(out []byte, typ byte, b []byte) []byte {
	for len(b) > 0 {
		chunk := b[:min(len(b), maxPlaintext)]
		b = b[len(chunk):]
		overhead := 1 + r.out.aead.Overhead()
		at := len(out)
		out = append(out, recordTypeAppData, 3, 3, 0, 0)
		binary.BigEndian.PutUint16(out[at+3:], uint16(len(chunk)+overhead))
		if cap(out)-len(out) < len(chunk)+overhead {
			grown := make([]byte, len(out), 2*cap(out)+len(chunk)+overhead)
			copy(grown, out)
			out = grown
		}
		out = append(out, chunk...)
		out = append(out, typ)
		nonce := r.out.nonce()
		sealed := r.out.aead.Seal(out[at+recordHeaderLen:at+recordHeaderLen], nonce[:], out[at+recordHeaderLen:], out[at:at+recordHeaderLen])
		out = out[:at+recordHeaderLen+len(sealed)]
		r.out.seq++
	}
	return out
}

// tlsKeys is a connection's key log (Config.KeyLogWriter): the
// application traffic secrets crypto/tls derives, for takeOver.
type tlsKeys struct {
	client, server []byte
}

func (k *tlsKeys) Write(line []byte) (int, error) {
	f := bytes.Fields(line)
	if len(f) != 3 {
		return len(line), nil
	}
	secret := make([]byte, hex.DecodedLen(len(f[2])))
	if _, err := hex.Decode(secret, f[2]); err != nil {
		return 0, err
	}
	switch string(f[0]) {
	case "CLIENT_TRAFFIC_SECRET_0":
		k.client = secret
	case "SERVER_TRAFFIC_SECRET_0":
		k.server = secret
	}
	return len(line), nil
}

// recordsTLS is base for connections the records may take over: each
// handshake logs its keys to its own connection's tlsKeys (the
// ClientHelloInfo's Conn is the tlsSocket), and sends no session ticket
// (which crypto/tls would seal with the server's application key before
// the handshake ends, and which edges do not need: they reconnect
// rarely). What base's GetConfigForClient returns gets the same.
func recordsTLS(base *tls.Config) *tls.Config {
	base = base.Clone() // what the caller changes later is not read here
	cfg := base.Clone()
	cfg.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		c := base
		if base.GetConfigForClient != nil {
			got, err := base.GetConfigForClient(hi)
			if err != nil {
				return nil, err
			}
			if got != nil {
				c = got
			}
		}
		c = c.Clone()
		c.GetConfigForClient = nil
		c.SessionTicketsDisabled = true
		if s, ok := hi.Conn.(*tlsSocket); ok && s.keys != nil {
			c.KeyLogWriter = s.keys
		}
		return c, nil
	}
	return cfg
}
