package checkpoint

import (
	"encoding/binary"

	"github.com/runnel-io/runnel/state"
)

// Meta is the metadata of one committed checkpoint, as the edge stores it
// (sys/checkpoint "last" in its state file, docs/formats/state-layout.md)
// in the transaction that commits the checkpoint's state and outbox
// entries.
type Meta struct {
	ID uint64 // the barrier id; ids only grow, across restores too
	// LogPos is the first ingest log position the checkpoint does not
	// cover: replay after a crash starts there.
	LogPos uint64
	// NextSeq is the sequence number of the next outbox entry.
	NextSeq uint64
}

// metaVersion 2: the pipelines' operator state is in op records and bases.
// Version 1 went with the state layout version 1 (operator state in
// namespaces), which state.Open refuses before the record is read.
const metaVersion = 2

// AppendMeta appends the encoding of m to dst: u8 version 2, uvarint id,
// uvarint log position, uvarint next outbox sequence.
func AppendMeta(dst []byte, m Meta) []byte {
	dst = append(dst, metaVersion)
	dst = binary.AppendUvarint(dst, m.ID)
	dst = binary.AppendUvarint(dst, m.LogPos)
	return binary.AppendUvarint(dst, m.NextSeq)
}

// DecodeMeta decodes a checkpoint record. A record of another version is
// ErrFormat; a truncated one, or one with bytes after its fields,
// ErrCorrupt.
func DecodeMeta(b []byte) (Meta, error) {
	if len(b) == 0 {
		return Meta{}, corruptf("checkpoint: metadata record is empty")
	}
	if b[0] != metaVersion {
		return Meta{}, errorf(ErrFormat, "checkpoint: metadata record version %d (this build reads %d)", b[0], metaVersion)
	}
	b = b[1:]
	var vs [3]uint64
	for i := range vs {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return Meta{}, corruptf("checkpoint: metadata record truncated at field %d", i+1)
		}
		vs[i], b = v, b[n:]
	}
	if len(b) != 0 {
		return Meta{}, corruptf("checkpoint: metadata record has %d bytes after its fields", len(b))
	}
	return Meta{ID: vs[0], LogPos: vs[1], NextSeq: vs[2]}, nil
}

// Where the edge keeps its checkpoint record in its state file.
const (
	MetaBucket = "checkpoint"
	MetaKey    = "last"
)

// LoadMeta reads the checkpoint record of the state file tx reads; ok is
// false when there is none (no checkpoint was committed yet).
func LoadMeta(tx *state.Tx) (m Meta, ok bool, err error) {
	b, err := tx.Bucket(MetaBucket)
	if err != nil {
		return Meta{}, false, err
	}
	v, err := b.Get([]byte(MetaKey))
	if err != nil || v == nil {
		return Meta{}, false, err
	}
	m, err = DecodeMeta(v)
	return m, err == nil, err
}

// StoreMeta writes m as the checkpoint record, in tx (an Update's).
func StoreMeta(tx *state.Tx, m Meta) error {
	b, err := tx.Bucket(MetaBucket)
	if err != nil {
		return err
	}
	return b.Put([]byte(MetaKey), AppendMeta(nil, m))
}
