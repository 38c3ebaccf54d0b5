package edge

import (
	"encoding/binary"
	"errors"
	"time"
)

// Ingest log records (docs/formats/ingest-log.md, "Edge records"). The log
// holds opaque records; the edge writes two sorts. A message is
//
//	uvarint len(topic) | topic | payload
//
// with a topic of at least one byte (MQTT topic names are never empty). A
// record whose topic length is 0 is a control record, 0x00 | kind | body:
//
//	'c' clock:     varint Unix ms, the node's clock when it was written
//	'o' oversized: uvarint size | uvarint len(topic) | topic | first bytes
//
// Clock records put processing time into the log, so that what depends on
// it (event-time bounds, the idle advance of the watermark) is replayed
// exactly: a record is judged by the last clock record before it, in the
// live run and in any replay of it. An oversized record stands for a
// message longer than the log's record limit, which the node acknowledged
// and keeps only the start of, so that it becomes a dead letter instead
// of blocking the broker.

// Control record kinds.
const (
	recordClock     = 'c'
	recordOversized = 'o'
)

// oversizedPrefix is how much of an oversized message its record keeps.
const oversizedPrefix = 1024

// record is a decoded ingest log record. Topic and Payload alias the
// record's bytes (Topic is a copy).
type record struct {
	kind    byte   // 0 for a message, else a control record's kind
	topic   string // message, oversized
	payload []byte // message; oversized: the first bytes
	clock   int64  // clock
	size    int64  // oversized: the message's length
}

func encodeRecord(dst []byte, topic string, payload []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(topic)))
	dst = append(dst, topic...)
	return append(dst, payload...)
}

func encodeClock(dst []byte, ms int64) []byte {
	dst = append(dst, 0, recordClock)
	return binary.AppendVarint(dst, ms)
}

// encodeOversized keeps the start of a message of size bytes whose payload
// starts with payload.
func encodeOversized(dst []byte, topic string, payload []byte, size int) []byte {
	dst = append(dst, 0, recordOversized)
	dst = binary.AppendUvarint(dst, uint64(size))
	dst = binary.AppendUvarint(dst, uint64(len(topic)))
	dst = append(dst, topic...)
	return append(dst, payload[:min(len(payload), oversizedPrefix)]...)
}

var errBadRecord = errors.New("edge: ingest record: corrupt")

// decodeRecord decodes an ingest-log record. A message's topic is last
// when it reads the same, so that a run of one topic's messages does not
// allocate a string each.
func decodeRecord(rec []byte, last string) (record, error) {
	l, w := binary.Uvarint(rec)
	if w <= 0 || uint64(len(rec)-w) < l {
		return record{}, errors.New("edge: ingest record: bad topic length")
	}
	if l > 0 {
		topic := last
		if b := rec[w : w+int(l)]; string(b) != last {
			topic = string(b)
		}
		return record{topic: topic, payload: rec[w+int(l):]}, nil
	}
	b := rec[w:]
	if len(b) == 0 {
		return record{}, errBadRecord
	}
	r := record{kind: b[0]}
	b = b[1:]
	switch r.kind {
	case recordClock:
		v, n := binary.Varint(b)
		if n <= 0 || n != len(b) {
			return record{}, errBadRecord
		}
		r.clock = v
	case recordOversized:
		size, n := binary.Uvarint(b)
		if n <= 0 || size > 1<<40 {
			return record{}, errBadRecord
		}
		b = b[n:]
		tl, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < tl || tl == 0 {
			return record{}, errBadRecord
		}
		r.size, r.topic, r.payload = int64(size), string(b[n:n+int(tl)]), b[n+int(tl):]
	default:
		return record{}, errBadRecord
	}
	return r, nil
}

// plausibleClock is the earliest wall clock the node trusts: a gateway
// without a real-time clock starts near 1970 until it synchronises, and
// bounding event times by such a clock would refuse every reading. Before
// it the node writes no clock records.
var plausibleClock = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
