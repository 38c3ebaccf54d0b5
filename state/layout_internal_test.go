package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

func TestRecord(t *testing.T) {
	seed := nameSeed(domainSys, "oplog/x")
	rec, crc := appendRecord(nil, seed, []byte("key"), []byte("payload"))
	if len(rec) != recordSize(len("payload")) || storedCRC(rec) != crc {
		t.Fatalf("record %x, crc %08x", rec, crc)
	}
	p, got, err := decodeRecord(seed, []byte("key"), rec)
	if err != nil || string(p) != "payload" || got != crc {
		t.Fatalf("decode: %q, %08x, %v", p, got, err)
	}
	for _, tc := range []struct {
		name string
		seed uint32
		key  string
		rec  []byte
	}{
		{"other key", seed, "kez", rec},
		{"longer key", seed, "keyp", rec},
		{"other bucket", nameSeed(domainSys, "oplog/y"), "key", rec},
		{"meta", metaSeed, "key", rec},
		{"flipped payload", seed, "key", flip(rec, len(rec)-1)},
		{"flipped crc", seed, "key", flip(rec, 2)},
		{"version 2", seed, "key", append([]byte{2}, rec[1:]...)},
		{"short", seed, "key", rec[:4]},
		{"empty", seed, "key", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := decodeRecord(tc.seed, []byte(tc.key), tc.rec); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestRecordCRCDefinition pins recordCRC to the definition in
// docs/formats/state-layout.md, on both sides of the one-byte length.
func TestRecordCRCDefinition(t *testing.T) {
	seed := nameSeed(domainSys, "outbox")
	for _, n := range []int{0, 1, 127, 128, 300, 20000} {
		key := bytes.Repeat([]byte{'k'}, n)
		in := append(binary.AppendUvarint(nil, uint64(n)), key...)
		in = append(in, "payload"...)
		if got, want := recordCRC(seed, key, []byte("payload")), crc32.Update(seed, castagnoli, in); got != want {
			t.Fatalf("key of %d bytes: %08x, want %08x", n, got, want)
		}
	}
	want := crc32.Checksum(append([]byte{'y', 6}, "outbox"...), castagnoli)
	if seed != want {
		t.Fatalf("seed %08x, want %08x", seed, want)
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1
	return c
}

// FuzzDecodeRecord: any bytes under any key either decode to a payload
// that re-encodes to the same record, or give ErrCorrupt.
func FuzzDecodeRecord(f *testing.F) {
	seed := nameSeed(domainSys, "outbox")
	rec, _ := appendRecord(nil, seed, []byte("k"), []byte("v"))
	f.Add([]byte("k"), rec)
	f.Add([]byte("k"), []byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, key, rec []byte) {
		p, crc, err := decodeRecord(seed, key, rec)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		again, crc2 := appendRecord(nil, seed, key, p)
		if !bytes.Equal(again, rec) || crc != crc2 {
			t.Fatalf("record %x decoded, re-encodes as %x", rec, again)
		}
	})
}

// FuzzMetaRecords: the meta bucket's payloads.
func FuzzMetaRecords(f *testing.F) {
	f.Add(encodeMetaFormat())
	f.Add(encodeMetaKeyGroups(128))
	f.Add([]byte{0x80, 0x80, 0x04})
	f.Fuzz(func(t *testing.T, p []byte) {
		if v, err := decodeMetaFormat(p); err == nil {
			if len(p) != 1 || int(p[0]) != v {
				t.Fatalf("format %x -> %d", p, v)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("format: %v", err)
		}
		if n, err := decodeMetaKeyGroups(p); err == nil {
			if n < 1 || n > MaxKeyGroups || !bytes.Equal(encodeMetaKeyGroups(n), p) {
				t.Fatalf("keygroups %x -> %d", p, n)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("keygroups: %v", err)
		}
	})
}
