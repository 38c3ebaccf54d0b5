package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

func TestRecord(t *testing.T) {
	seed := groupSeed(nameSeed(domainState, "window/x"), 5)
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
		{"other group", groupSeed(nameSeed(domainState, "window/x"), 6), "key", rec},
		{"other namespace", groupSeed(nameSeed(domainState, "window/y"), 5), "key", rec},
		{"system bucket of the same name", nameSeed(domainSys, "window/x"), "key", rec},
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

func TestGroupKey(t *testing.T) {
	for _, g := range []int{0, 1, 255, 256, MaxKeyGroups - 1} {
		k := groupKey(g)
		got, err := parseGroupKey(k[:], MaxKeyGroups)
		if err != nil || got != g {
			t.Fatalf("group %d: %d, %v", g, got, err)
		}
	}
	if a, b := groupKey(255), groupKey(256); bytes.Compare(a[:], b[:]) >= 0 {
		t.Fatal("group keys do not sort by group")
	}
	for _, bad := range [][]byte{nil, {1}, {0, 1, 2}, {0, 9}} {
		if _, err := parseGroupKey(bad, 8); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("parseGroupKey(%x): %v", bad, err)
		}
	}
}

// FuzzDecodeRecord: any bytes under any key either decode to a payload
// that re-encodes to the same record, or give ErrCorrupt.
func FuzzDecodeRecord(f *testing.F) {
	seed := groupSeed(nameSeed(domainState, "ns"), 1)
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

// FuzzGroupKey: bucket names decode to an in-range group that encodes back,
// or give ErrCorrupt.
func FuzzGroupKey(f *testing.F) {
	f.Add([]byte{0, 5}, 128)
	f.Add([]byte{0xff, 0xff}, MaxKeyGroups)
	f.Fuzz(func(t *testing.T, k []byte, groups int) {
		if groups < 1 || groups > MaxKeyGroups {
			return
		}
		g, err := parseGroupKey(k, groups)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		if back := groupKey(g); g < 0 || g >= groups || !bytes.Equal(back[:], k) {
			t.Fatalf("%x -> %d -> %x", k, g, back)
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
