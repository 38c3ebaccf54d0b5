package checkpoint_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/checkpoint"
)

func drawManifest(t *rapid.T) checkpoint.Manifest {
	name := rapid.StringMatching(`[A-Za-z0-9._-]{1,64}`)
	return checkpoint.Manifest{
		EdgeID:     name.Draw(t, "edge"),
		Checkpoint: rapid.Uint64Min(1).Draw(t, "ckpt"),
		Epoch:      rapid.Uint64Min(1).Draw(t, "epoch"),
		LogPos:     rapid.Uint64().Draw(t, "pos"),
		NextSeq:    rapid.Uint64().Draw(t, "seq"),
		StateSize:  rapid.Int64Range(0, 1<<62).Draw(t, "ssize"),
		StateSum:   rapid.Uint64().Draw(t, "ssum"),
		DataSize:   rapid.Int64Range(20, 1<<62).Draw(t, "dsize"),
		DataSum:    rapid.Uint64().Draw(t, "dsum"),
		Created:    time.UnixMilli(rapid.Int64Range(-1<<50, 1<<50).Draw(t, "created")).UTC(),
		Runnel:     rapid.StringN(0, 40, 255).Draw(t, "version"),
	}
}

func TestManifestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := drawManifest(t)
		b := checkpoint.AppendManifest(nil, &m)
		got, err := checkpoint.DecodeManifest(b)
		if err != nil {
			t.Fatalf("DecodeManifest: %v", err)
		}
		if got != m {
			t.Fatalf("round trip: %+v, want %+v", got, m)
		}
		// Any flipped bit and any truncation is refused as corrupt.
		i := rapid.IntRange(0, len(b)-1).Draw(t, "byte")
		bad := bytes.Clone(b)
		bad[i] ^= 1 << rapid.IntRange(0, 7).Draw(t, "bit")
		if _, err := checkpoint.DecodeManifest(bad); !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Fatalf("bit flipped in byte %d: %v, want ErrCorrupt", i, err)
		}
		if _, err := checkpoint.DecodeManifest(b[:i]); !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Fatalf("cut to %d bytes: %v, want ErrCorrupt", i, err)
		}
	})
}

func TestHeaderRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := checkpoint.Header{
			EdgeID:     rapid.StringMatching(`[A-Za-z0-9._-]{1,64}`).Draw(t, "edge"),
			Checkpoint: rapid.Uint64Min(1).Draw(t, "ckpt"),
			Epoch:      rapid.Uint64Min(1).Draw(t, "epoch"),
			StateSize:  rapid.Int64Range(0, 1<<62).Draw(t, "size"),
		}
		b := checkpoint.AppendHeader(nil, &h)
		tail := rapid.SliceOfN(rapid.Byte(), 0, 20).Draw(t, "tail")
		got, n, err := checkpoint.DecodeHeader(append(bytes.Clone(b), tail...))
		if err != nil || got != h || n != len(b) {
			t.Fatalf("DecodeHeader = %+v, %d, %v; want %+v, %d", got, n, err, h, len(b))
		}
		i := rapid.IntRange(0, len(b)-1).Draw(t, "byte")
		bad := bytes.Clone(b)
		bad[i] ^= 1 << rapid.IntRange(0, 7).Draw(t, "bit")
		if _, _, err := checkpoint.DecodeHeader(bad); !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Fatalf("bit flipped in byte %d: %v, want ErrCorrupt", i, err)
		}
		if _, _, err := checkpoint.DecodeHeader(b[:i]); !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Fatalf("cut to %d bytes: %v, want ErrCorrupt", i, err)
		}
	})
}

// A newer version with the same framing (CRC intact) is ErrFormat, not
// corruption.
func TestNewerVersions(t *testing.T) {
	m := checkpoint.Manifest{EdgeID: "gw", Checkpoint: 1, Epoch: 1, DataSize: 100, Created: time.UnixMilli(0).UTC()}
	b := checkpoint.AppendManifest(nil, &m)
	b[8] = 2
	b = refreshCRC(b)
	if _, err := checkpoint.DecodeManifest(b); !errors.Is(err, checkpoint.ErrFormat) || errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("manifest version 2: %v, want ErrFormat only", err)
	}
	h := checkpoint.AppendHeader(nil, &checkpoint.Header{EdgeID: "gw", Checkpoint: 1, Epoch: 1})
	h[8] = 9
	h = refreshCRC(h)
	if _, _, err := checkpoint.DecodeHeader(h); !errors.Is(err, checkpoint.ErrFormat) {
		t.Fatalf("data version 9: %v, want ErrFormat", err)
	}
}

// golden is the encoding of a fixed manifest and data header, pinned in
// testdata: a change to the layout is a new version, not an accident.
func TestGoldenLayout(t *testing.T) {
	m := checkpoint.Manifest{EdgeID: "gw-001", Checkpoint: 42, Epoch: 3, LogPos: 123456, NextSeq: 789,
		StateSize: 65536, StateSum: 0x0123456789abcdef, DataSize: 4096, DataSum: 0xfedcba9876543210,
		Created: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC), Runnel: "v0.13.0"}
	h := checkpoint.Header{EdgeID: "gw-001", Checkpoint: 42, Epoch: 3, StateSize: 65536}
	for _, g := range []struct {
		file string
		b    []byte
	}{
		{"manifest.golden", checkpoint.AppendManifest(nil, &m)},
		{"data-header.golden", checkpoint.AppendHeader(nil, &h)},
	} {
		path := filepath.Join("testdata", g.file)
		if os.Getenv("UPDATE_GOLDEN") != "" {
			if err := os.WriteFile(path, g.b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
		}
		if !bytes.Equal(g.b, want) {
			t.Errorf("%s: encoding changed:\n got % x\nwant % x", g.file, g.b, want)
		}
	}
	got, err := checkpoint.DecodeManifest(checkpoint.AppendManifest(nil, &m))
	if err != nil || got != m {
		t.Fatalf("golden manifest: %+v, %v", got, err)
	}
}

// state is a pseudo state file: compressible, as a bbolt file is.
func state(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		if rng.IntN(4) == 0 {
			b[i] = byte(rng.Uint32())
		}
	}
	return b
}

// snapshot returns a data object of st and its manifest.
func snapshot(t testing.TB, st []byte) ([]byte, checkpoint.Manifest) {
	t.Helper()
	m := checkpoint.Manifest{EdgeID: "gw-7", Checkpoint: 9, Epoch: 2, LogPos: 100, NextSeq: 5, Created: time.UnixMilli(1_767_225_600_000).UTC(), Runnel: "test"}
	var data bytes.Buffer
	sums, err := checkpoint.WriteData(&data, &checkpoint.Header{EdgeID: m.EdgeID, Checkpoint: m.Checkpoint, Epoch: m.Epoch, StateSize: int64(len(st))}, bytes.NewReader(st))
	if err != nil {
		t.Fatal(err)
	}
	m.StateSize, m.StateSum, m.DataSize, m.DataSum = sums.StateSize, sums.StateSum, sums.DataSize, sums.DataSum
	if m.DataSize != int64(data.Len()) {
		t.Fatalf("Sums.DataSize %d, wrote %d", m.DataSize, data.Len())
	}
	return data.Bytes(), m
}

func TestDataRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 1000, 3 << 20} {
		st := state(n, uint64(n))
		data, m := snapshot(t, st)
		var out bytes.Buffer
		if err := checkpoint.ReadData(bytes.NewReader(data), &m, &out); err != nil {
			t.Fatalf("%d bytes: ReadData: %v", n, err)
		}
		if !bytes.Equal(out.Bytes(), st) {
			t.Fatalf("%d bytes: restored state differs", n)
		}
		if n > 1000 && m.DataSize > int64(n)/2 {
			t.Errorf("%d bytes compressed to %d", n, m.DataSize)
		}
	}
}

// Every flipped byte and every truncation of a data object is refused
// with ErrCorrupt and a reason, and so is a data object under another
// snapshot's manifest.
func TestDataRefusesDamage(t *testing.T) {
	st := state(200_000, 3)
	data, m := snapshot(t, st)
	read := func(b []byte, m checkpoint.Manifest) error {
		return checkpoint.ReadData(bytes.NewReader(b), &m, &bytes.Buffer{})
	}
	rng := rand.New(rand.NewPCG(4, 5))
	positions := []int{0, 8, 9, 12, 20, 30, len(data) / 2, len(data) - 5, len(data) - 1}
	for range 40 {
		positions = append(positions, rng.IntN(len(data)))
	}
	for _, i := range positions {
		bad := bytes.Clone(data)
		bad[i] ^= byte(1 + rng.IntN(255))
		err := read(bad, m)
		if !errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), "damaged") {
			t.Fatalf("byte %d of %d flipped: %v, want ErrCorrupt saying damaged", i, len(data), err)
		}
	}
	for _, n := range []int{0, 5, 13, 40, len(data) / 3, len(data) - 1} {
		err := read(data[:n], m)
		if !errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), "truncated") {
			t.Fatalf("cut to %d of %d bytes: %v, want ErrCorrupt saying truncated", n, len(data), err)
		}
	}
	if err := read(append(bytes.Clone(data), 0), m); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("a byte appended: %v, want ErrCorrupt", err)
	}
	// The right object under a manifest that says otherwise.
	other := m
	other.Checkpoint = 10
	if err := read(data, other); !errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), "checkpoint 10") {
		t.Fatalf("under another checkpoint's manifest: %v", err)
	}
	other = m
	other.StateSum++
	if err := read(data, other); !errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), "state file") {
		t.Fatalf("manifest with another state checksum: %v", err)
	}
}

// A state source that writes other than it announced fails the write.
func TestWriteDataSizeMismatch(t *testing.T) {
	_, err := checkpoint.WriteData(&bytes.Buffer{}, &checkpoint.Header{EdgeID: "gw", Checkpoint: 1, Epoch: 1, StateSize: 10}, bytes.NewReader(make([]byte, 9)))
	if err == nil {
		t.Fatal("9 bytes for a header of 10: no error")
	}
}

func FuzzDecodeManifest(f *testing.F) {
	m := checkpoint.Manifest{EdgeID: "gw-001", Checkpoint: 42, Epoch: 3, LogPos: 1, NextSeq: 2, StateSize: 10, DataSize: 40, Created: time.UnixMilli(5).UTC(), Runnel: "v1"}
	f.Add(checkpoint.AppendManifest(nil, &m))
	f.Add([]byte("RNLSNAPM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := checkpoint.DecodeManifest(b)
		if err != nil {
			if !errors.Is(err, checkpoint.ErrCorrupt) && !errors.Is(err, checkpoint.ErrFormat) {
				t.Fatalf("error of no class: %v", err)
			}
			return
		}
		if again, err := checkpoint.DecodeManifest(checkpoint.AppendManifest(nil, &m)); err != nil || again != m {
			t.Fatalf("decoded %+v from % x; re-encoded it decodes as %+v, %v", m, b, again, err)
		}
	})
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add(checkpoint.AppendHeader(nil, &checkpoint.Header{EdgeID: "gw", Checkpoint: 1, Epoch: 1, StateSize: 4096}))
	f.Add([]byte("RNLSNAPD\x01\x01\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := checkpoint.DecodeHeader(b)
		if err != nil {
			if !errors.Is(err, checkpoint.ErrCorrupt) && !errors.Is(err, checkpoint.ErrFormat) {
				t.Fatalf("error of no class: %v", err)
			}
			return
		}
		if again, _, err := checkpoint.DecodeHeader(checkpoint.AppendHeader(nil, &h)); err != nil || again != h || n > len(b) {
			t.Fatalf("decoded %+v (%d bytes) from % x; re-encoded it decodes as %+v, %v", h, n, b, again, err)
		}
	})
}

// FuzzReadData: whatever the bytes, ReadData under a manifest either
// refuses them with ErrCorrupt or ErrFormat, or they are the snapshot
// the manifest describes.
func FuzzReadData(f *testing.F) {
	st := state(5000, 8)
	data, m := snapshot(f, st)
	f.Add(data)
	f.Add(data[:30])
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		err := checkpoint.ReadData(bytes.NewReader(b), &m, &out)
		if err != nil {
			if !errors.Is(err, checkpoint.ErrCorrupt) && !errors.Is(err, checkpoint.ErrFormat) {
				t.Fatalf("error of no class: %v", err)
			}
			return
		}
		if !bytes.Equal(out.Bytes(), st) {
			t.Fatal("accepted bytes that do not restore the state")
		}
	})
}

// refreshCRC recomputes the CRC-32C at the end of a manifest or header.
func refreshCRC(b []byte) []byte {
	return binaryAppendCRC(b[:len(b)-4])
}
