package mqtt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unsafe"
)

// The reader: one goroutine per connection that owns the socket's read
// side. It reads whatever the socket holds into one buffer, frames the
// MQTT packets in it, decodes each PUBLISH in place and hands all of them
// to the handler as one Batch — one wake-up, one handler call and one
// acknowledgement for many messages, where a library reading packet by
// packet costs a wake-up, a goroutine hand-off and several allocations
// per message. Between reads it waits Config.BatchWait when a read did not
// fill the buffer, so that more messages arrive per wake-up (the added
// latency is at most BatchWait). PUBREL (the broker's second step of a
// QoS 2 delivery) is answered with PUBCOMP here too; every other packet is
// queued for the client library (bufConn.Read).

// idleProbe is how long a read waits, after messages were handled,
// before the source calls Config.Idle: the connection is silent.
const idleProbe = time.Millisecond

// MQTT control packet types (MQTT v5 §2.1.2, the same in v3.1.1).
const (
	typeConnack = 2
	typePublish = 3
	typePuback  = 4
	typePubrec  = 5
	typePubrel  = 6
	typePubcomp = 7
)

const (
	// minReadBuffer is the reader's buffer at the start of a connection:
	// room for a topic of the longest length MQTT allows and its packet's
	// start, for a packet too long to be read whole.
	minReadBuffer = 128 << 10
	// headerSlack is how much longer than Config.MaxMessage a packet may
	// be and still be read whole: its topic and properties.
	headerSlack = 128 << 10
)

var errMalformed = errors.New("mqtt: malformed packet from the broker")

// frame reads the fixed header at the start of b: the packet type and
// flags, the header's length and the remaining length. ok is false when b
// does not hold the whole fixed header yet; a remaining length longer than
// four bytes is malformed.
func frame(b []byte) (typ, flags byte, hdr, rem int, ok bool, err error) {
	if len(b) < 2 {
		return 0, 0, 0, 0, false, nil
	}
	mult := 1
	for i := 1; i < 5; i++ {
		if i >= len(b) {
			return 0, 0, 0, 0, false, nil
		}
		rem += int(b[i]&0x7f) * mult
		if b[i]&0x80 == 0 {
			return b[0] >> 4, b[0] & 0x0f, i + 1, rem, true, nil
		}
		mult <<= 7
	}
	return 0, 0, 0, 0, false, fmt.Errorf("%w: remaining length longer than 4 bytes", errMalformed)
}

// parsePublish decodes a PUBLISH from its fixed header's flags and its
// body (what follows the remaining length). Topic and Payload alias body.
// size is the payload's length on the wire, which may be more than body
// holds (a packet too long to be read whole: only its start is in body);
// the payload is then the part body holds. v5 says whether a properties
// section follows the packet ID. Properties are skipped: the source asks
// for no topic aliases, and keeps no other property.
func parsePublish(flags byte, body []byte, size int, v5 bool) (Message, error) {
	m := Message{QoS: (flags >> 1) & 3, Retain: flags&1 != 0, Duplicate: flags&8 != 0}
	if m.QoS == 3 {
		return m, fmt.Errorf("%w: PUBLISH with QoS 3", errMalformed)
	}
	if len(body) < 2 {
		return m, fmt.Errorf("%w: PUBLISH of %d bytes", errMalformed, len(body))
	}
	n := int(body[0])<<8 | int(body[1])
	i := 2 + n
	if i > len(body) {
		return m, fmt.Errorf("%w: PUBLISH topic of %d bytes in %d", errMalformed, n, len(body))
	}
	if n > 0 {
		m.Topic = unsafe.String(&body[2], n)
	}
	if m.QoS > 0 {
		if i+2 > len(body) {
			return m, fmt.Errorf("%w: PUBLISH without a packet ID", errMalformed)
		}
		m.PacketID = uint16(body[i])<<8 | uint16(body[i+1])
		if m.PacketID == 0 {
			return m, fmt.Errorf("%w: PUBLISH with packet ID 0", errMalformed)
		}
		i += 2
	}
	if v5 {
		plen, w := uvarint(body[i:])
		if w <= 0 {
			return m, fmt.Errorf("%w: PUBLISH properties length", errMalformed)
		}
		i += w
		if plen > size-i {
			return m, fmt.Errorf("%w: PUBLISH properties of %d bytes in %d", errMalformed, plen, size-i)
		}
		i += plen
	}
	m.Size = size - i
	if i < len(body) {
		m.Payload = body[i:]
	}
	return m, nil
}

// uvarint decodes an MQTT variable byte integer; w is 0 when b is short
// and -1 when it is longer than four bytes.
func uvarint(b []byte) (v, w int) {
	mult := 1
	for i := 0; i < 4; i++ {
		if i >= len(b) {
			return 0, 0
		}
		v += int(b[i]&0x7f) * mult
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
		mult <<= 7
	}
	return 0, -1
}

// readLoop is a connection's reader; it returns when the socket fails or is
// closed, after telling the library.
func (s *Source) readLoop(c *bufConn, gen uint64) {
	defer s.readers.Done()
	err := s.read(c, gen)
	s.acks.lost(gen)
	c.endRead(err)
	_ = c.Conn.Close()
}

func (s *Source) read(c *bufConn, gen uint64) error {
	v5 := s.cfg.Protocol != ProtocolV311
	maxBuf := s.cfg.MaxMessage + headerSlack
	buf := make([]byte, minReadBuffer)
	var start, end int // unread bytes: buf[start:end]
	var msgs []Message
	discard := 0     // bytes of an over-long packet still to skip
	handled := false // messages handed to the handler since the last Idle
	for {
		if start == end {
			start, end = 0, 0
		} else if end == len(buf) && start > 0 {
			end = copy(buf, buf[start:end])
			start = 0
		}
		probe := handled && s.cfg.Idle != nil
		if probe {
			c.Conn.SetReadDeadline(time.Now().Add(idleProbe))
		}
		n, err := c.Conn.Read(buf[end:])
		if probe {
			c.Conn.SetReadDeadline(time.Time{})
			if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
				handled = false
				s.cfg.Idle()
				continue
			}
		}
		if n == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		full := end+n == len(buf)
		end += n
		if discard > 0 {
			k := min(discard, end-start)
			start += k
			discard -= k
			if discard > 0 {
				continue
			}
		}
		msgs = msgs[:0]
		for start < end {
			typ, flags, hdr, rem, ok, err := frame(buf[start:end])
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			total := hdr + rem
			if total > end-start {
				if total > maxBuf && typ != typePublish {
					return fmt.Errorf("%w: packet type %d of %d bytes", errMalformed, typ, total)
				}
				if total > len(buf) && len(buf) < maxBuf {
					// Grow to hold the packet (the rest is read next).
					nb := make([]byte, min(max(total, 2*len(buf)), maxBuf))
					end = copy(nb, buf[start:end])
					start, buf, full = 0, nb, false
				}
				if total <= len(buf) || end-start < len(buf) {
					break // read more
				}
				// A PUBLISH longer than the buffer can grow: deliver what
				// the full buffer holds of it (Size says how long it is)
				// and skip the rest of the packet.
				m, err := parsePublish(flags, buf[start+hdr:end], rem, v5)
				if err != nil {
					return err
				}
				msgs = append(msgs, m)
				discard = total - (end - start)
				start = end
				break
			}
			pkt := buf[start : start+total]
			start += total
			switch typ {
			case typePublish:
				m, err := parsePublish(flags, pkt[hdr:], rem, v5)
				if err != nil {
					return err
				}
				msgs = append(msgs, m)
			case typePubrel:
				if rem < 2 {
					return fmt.Errorf("%w: PUBREL of %d bytes", errMalformed, rem)
				}
				if err := c.writeShort(typePubcomp, uint16(pkt[hdr])<<8|uint16(pkt[hdr+1])); err != nil {
					return err
				}
			case typeConnack:
				// Acks of earlier connections are dropped from here on:
				// every message after this CONNACK is of this one.
				s.acks.connected(gen, c)
				c.queue(pkt)
			default:
				c.queue(pkt)
			}
		}
		if len(msgs) > 0 {
			s.handle(gen, msgs)
			handled = true
		}
		if err != nil {
			return err
		}
		if start == end && len(buf) > minReadBuffer && discard == 0 {
			// A long packet grew the buffer; it is done with (the
			// handler has returned), so a gateway does not keep up to
			// MaxMessage per connection for one large message.
			buf = make([]byte, minReadBuffer)
			start, end = 0, 0
		}
		if !full && s.cfg.BatchWait > 0 && len(msgs) > 0 {
			time.Sleep(s.cfg.BatchWait)
		}
	}
}
