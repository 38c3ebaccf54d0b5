package checkpoint_test

import (
	"errors"
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/checkpoint"
)

func TestMetaRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := checkpoint.Meta{ID: rapid.Uint64().Draw(t, "id"), LogPos: rapid.Uint64().Draw(t, "pos"), NextSeq: rapid.Uint64().Draw(t, "seq")}
		b := checkpoint.AppendMeta(nil, m)
		got, err := checkpoint.DecodeMeta(b)
		if err != nil || got != m {
			t.Fatalf("DecodeMeta(AppendMeta(%+v)) = %+v, %v", m, got, err)
		}
		// Every strict prefix is refused as corrupt, never decoded.
		for i := range len(b) {
			if _, err := checkpoint.DecodeMeta(b[:i]); !errors.Is(err, checkpoint.ErrCorrupt) {
				t.Fatalf("prefix of %d bytes: %v, want ErrCorrupt", i, err)
			}
		}
	})
}

// The version 2 layout is what state files on gateways hold: pinned.
func TestMetaLayout(t *testing.T) {
	b := checkpoint.AppendMeta(nil, checkpoint.Meta{ID: 1, LogPos: 300, NextSeq: math.MaxUint64})
	want := []byte{2, 1, 0xac, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	if string(b) != string(want) {
		t.Fatalf("AppendMeta = % x, want % x", b, want)
	}
	if _, err := checkpoint.DecodeMeta([]byte{1, 1, 1, 1}); !errors.Is(err, checkpoint.ErrFormat) {
		t.Fatalf("version 1: %v, want ErrFormat", err)
	}
	if _, err := checkpoint.DecodeMeta(append(b, 0)); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("a byte too many: %v, want ErrCorrupt", err)
	}
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(checkpoint.AppendMeta(nil, checkpoint.Meta{ID: 7, LogPos: 1 << 40, NextSeq: 12}))
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := checkpoint.DecodeMeta(b)
		if err != nil {
			if !errors.Is(err, checkpoint.ErrCorrupt) && !errors.Is(err, checkpoint.ErrFormat) {
				t.Fatalf("error of no class: %v", err)
			}
			return
		}
		// Varints may come overlong (Go's decoder takes them): what
		// decodes re-encodes to the same record.
		if again, err := checkpoint.DecodeMeta(checkpoint.AppendMeta(nil, m)); err != nil || again != m {
			t.Fatalf("decoded %+v from % x; re-encoded it decodes as %+v, %v", m, b, again, err)
		}
	})
}
