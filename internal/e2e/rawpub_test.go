package e2e

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// rawPublisher is a bare MQTT 3.1.1 QoS 1 publisher on one socket, for
// streams of hundreds of thousands of messages: it frames PUBLISH packets
// into a buffer and counts the broker's PUBACKs, with at most
// rawInflight unacknowledged. paho.golang's client costs several times
// its CPU per message, which under -race made the publisher, not the
// system under test, the bottleneck of TestWeekOffline. Messages go out
// in order on one connection, so the broker delivers them in order.
type rawPublisher struct {
	conn     net.Conn
	w        *bufio.Writer
	inflight chan struct{}
	id       uint16
	pkt      []byte
	wg       sync.WaitGroup
	done     chan struct{} // closed when the reader returns
	readErr  error         // why it did; read after done
}

const rawInflight = 1024

var rawPubSeq int

// dialRaw connects a clean-session publisher to hostPort; Close ends it.
func dialRaw(t testing.TB, hostPort string) *rawPublisher {
	t.Helper()
	conn, err := net.DialTimeout("tcp", hostPort, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rawPubSeq++
	id := fmt.Sprintf("e2e-rawpub-%d", rawPubSeq)
	// CONNECT: protocol "MQTT" level 4, clean session, keep-alive 0.
	vh := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 0}, byte(len(id)>>8), byte(len(id)))
	vh = append(vh, id...)
	if _, err := conn.Write(append(appendRemaining([]byte{0x10}, len(vh)), vh...)); err != nil {
		t.Fatal(err)
	}
	var ack [4]byte
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, ack[:]); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("raw publisher: CONNACK %x: %v", ack, err)
	}
	conn.SetReadDeadline(time.Time{})
	p := &rawPublisher{conn: conn, w: bufio.NewWriterSize(conn, 64<<10), inflight: make(chan struct{}, rawInflight), done: make(chan struct{})}
	p.wg.Go(p.read)
	t.Cleanup(p.Close)
	return p
}

// read takes PUBACKs (the only packets a publisher gets) until the
// connection ends.
func (p *rawPublisher) read() {
	r := bufio.NewReader(p.conn)
	for {
		h, err := r.ReadByte()
		if err == nil {
			var n uint64
			if n, err = binary.ReadUvarint(r); err == nil {
				_, err = r.Discard(int(n))
			}
		}
		if err != nil {
			p.readErr = err
			close(p.done)
			return
		}
		if h>>4 == 4 { // PUBACK
			<-p.inflight
		}
	}
}

// Publish sends one QoS 1 message; it blocks while rawInflight are
// unacknowledged.
func (p *rawPublisher) Publish(topic string, payload []byte) error {
	select {
	case p.inflight <- struct{}{}:
	default:
		if err := p.w.Flush(); err != nil {
			return err
		}
		select {
		case p.inflight <- struct{}{}:
		case <-p.done:
			return fmt.Errorf("raw publisher: connection ended: %v", p.readErr)
		}
	}
	p.id++
	if p.id == 0 {
		p.id = 1
	}
	n := 2 + len(topic) + 2 + len(payload)
	p.pkt = appendRemaining(append(p.pkt[:0], 0x32), n)
	p.pkt = append(p.pkt, byte(len(topic)>>8), byte(len(topic)))
	p.pkt = append(p.pkt, topic...)
	p.pkt = append(p.pkt, byte(p.id>>8), byte(p.id))
	p.pkt = append(p.pkt, payload...)
	_, err := p.w.Write(p.pkt)
	return err
}

// Flush sends what is buffered and waits until the broker acknowledged
// every message.
func (p *rawPublisher) Flush(timeout time.Duration) error {
	if err := p.w.Flush(); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for len(p.inflight) > 0 {
		select {
		case <-p.done:
			return fmt.Errorf("raw publisher: connection ended with %d messages unacknowledged: %v", len(p.inflight), p.readErr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("raw publisher: %d messages unacknowledged after %v", len(p.inflight), timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// Close sends DISCONNECT, closes the connection and waits for the reader.
func (p *rawPublisher) Close() {
	if p.conn == nil {
		return
	}
	p.w.Write([]byte{0xe0, 0})
	p.w.Flush()
	p.conn.Close()
	p.wg.Wait()
	p.conn = nil
}

// appendRemaining appends MQTT's variable-length remaining length.
func appendRemaining(b []byte, n int) []byte {
	for {
		c := byte(n % 128)
		n /= 128
		if n > 0 {
			c |= 0x80
		}
		b = append(b, c)
		if n == 0 {
			return b
		}
	}
}
