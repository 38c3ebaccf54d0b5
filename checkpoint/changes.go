package checkpoint

import "encoding/binary"

// ChangeWriter receives the state changes of one checkpoint, in order. It
// has the method set of window.SnapshotWriter, which the window operator
// writes its snapshots to: each implements the other. Keys and values are
// valid only during the call.
type ChangeWriter interface {
	// Put sets key (in the partition of hash) to value.
	Put(hash uint64, key, value []byte) error
	// Delete deletes key (in the partition of hash).
	Delete(hash uint64, key []byte) error
	// DeletePrefix deletes every entry whose key starts with prefix, in
	// every partition.
	DeletePrefix(prefix []byte) error
}

// Changes records state changes back to back, to be replayed onto another
// ChangeWriter in the same order: what a worker hands on with a barrier,
// so that the checkpoint writer gets the changes of every worker at once.
// It is memory only (never stored), and it trusts its own bytes. The zero
// value is empty and ready.
//
// Encoding, per change: op ('P' put, 'D' delete, 'X' delete prefix) |
// be64 hash | uvarint len(key) | key | uvarint len(value) | value.
type Changes struct {
	b []byte
}

// Change operations, as Changes records them (and the edge's op records
// store them, docs/formats/state-layout.md).
const (
	OpPut          = 'P'
	OpDelete       = 'D'
	OpDeletePrefix = 'X'
)

func (c *Changes) op(op byte, hash uint64, key, value []byte) {
	b := append(c.b, op)
	b = binary.BigEndian.AppendUint64(b, hash)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	c.b = append(b, value...)
}

// Put records a put. It never fails.
func (c *Changes) Put(hash uint64, key, value []byte) error {
	c.op(OpPut, hash, key, value)
	return nil
}

// Delete records a delete. It never fails.
func (c *Changes) Delete(hash uint64, key []byte) error {
	c.op(OpDelete, hash, key, nil)
	return nil
}

// DeletePrefix records a prefix deletion. It never fails.
func (c *Changes) DeletePrefix(prefix []byte) error {
	c.op(OpDeletePrefix, 0, prefix, nil)
	return nil
}

// Len returns the bytes recorded.
func (c *Changes) Len() int { return len(c.b) }

// Reset empties c, keeping its buffer.
func (c *Changes) Reset() { c.b = c.b[:0] }

// Replay plays the recorded changes onto w, in order, and stops at the
// first error w returns.
func (c *Changes) Replay(w ChangeWriter) error {
	b := c.b
	for len(b) > 0 {
		op, h := b[0], binary.BigEndian.Uint64(b[1:])
		b = b[9:]
		n, m := binary.Uvarint(b)
		k := b[m : m+int(n)]
		b = b[m+int(n):]
		n, m = binary.Uvarint(b)
		v := b[m : m+int(n)]
		b = b[m+int(n):]
		var err error
		switch op {
		case OpPut:
			err = w.Put(h, k, v)
		case OpDelete:
			err = w.Delete(h, k)
		default:
			err = w.DeletePrefix(k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
