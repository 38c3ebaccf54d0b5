package hub

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// FuzzApply feeds arbitrary batches to one hub: Apply must never panic and
// fail only with its sentinels, and a commit must always succeed.
func FuzzApply(f *testing.F) {
	p := compile(f, tempsYAML)
	seeds := []*runnelv1.Batch{
		wm(batch("a", 1, 1, 2, partial(p, 1, "k", 0, 1, 2), partial(p, 2, "k2", 1000, 3)), "temps", 1000),
		batch("a", 1, 3, 2),
		batch("a", 2, 1, 1, &runnelv1.Partial{Seq: 1, Pipeline: "global", WindowStart: 0, WindowEnd: 5, State: []byte{1, 3}}),
		batch("b", 0, 7, 9, partial(p, 8, "k", -1000, 1)),
		// Managed revisions: 1 is known, 5 is parked.
		wm(batch("c", 1, 1, 2, rpartial(p.Aggregates, 1, 1, "k", 0, 1), rpartial(p.Aggregates, 5, 2, "k", 0, 1)), "temps", 1000),
	}
	for _, b := range seeds {
		data, err := proto.Marshal(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	revs := tempsRevisions(f)
	th := newTestHub(f, func(c *Config) { c.Revisions = revs[:1] })
	f.Fuzz(func(t *testing.T, data []byte) {
		var b runnelv1.Batch
		if proto.Unmarshal(data, &b) != nil {
			return
		}
		err := th.Apply(&b)
		if err != nil && !errors.Is(err, ErrBadBatch) && !errors.Is(err, ErrGap) && !errors.Is(err, ErrFenced) && !errors.Is(err, ErrBadEpoch) {
			t.Fatalf("Apply: unexpected error %v", err)
		}
		if err := th.Hub.Commit(); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	})
}

// FuzzStoreRevisions feeds arbitrary bytes to the decoders of what format
// 3 added (parked keys with a revision, partial and result values of a
// class, query cursors): none panics, and whatever one accepts encodes
// back to the same bytes.
func FuzzStoreRevisions(f *testing.F) {
	f.Add(appendParkedPartialKey(nil, "temps", 3, "edge-1", 2, 9), byte(0))
	f.Add(appendParkedPrefix(nil, "temps", 0, "e", parkTagWatermark), byte(0))
	f.Add(appendPartialValue(nil, 1, 2, 3, true, 4, []byte{1, 2}), byte(1))
	f.Add(appendResultValue(nil, 2, 1000, true, []uint32{1, 2}, []byte{9}), byte(2))
	f.Add(appendCursor(nil, 3, appendResultKey(nil, 0, 1000, []byte("k"), 2)), byte(3))
	f.Add([]byte{0, 5, 't', 'e', 'm', 'p', 's', 0, 0, 0, 0, 1, 'e', 0}, byte(0))
	f.Fuzz(func(t *testing.T, b []byte, which byte) {
		switch which % 4 {
		case 0:
			pk, err := parseParkedKey(b)
			if err != nil {
				return
			}
			got := appendParkedPrefix(nil, string(pk.pipeline), pk.revision, string(pk.edge), pk.tag)
			if pk.tag == parkTagPartial {
				got = appendParkedPartialKey(nil, string(pk.pipeline), pk.revision, string(pk.edge), pk.epoch, pk.seq)
			}
			if string(got) != string(b) {
				t.Fatalf("parked key %x decodes to %+v, which encodes to %x", b, pk, got)
			}
		case 1:
			for _, managed := range []bool{false, true} {
				epoch, seq, version, rev, state, err := parsePartialValue(b, managed)
				if err != nil {
					continue
				}
				if got := appendPartialValue(nil, epoch, seq, version, managed, rev, state); string(got) != string(b) {
					t.Fatalf("partial value %x (managed %v) encodes back to %x", b, managed, got)
				}
			}
		case 2:
			for _, managed := range []bool{false, true} {
				edges, emitted, revs, state, err := parseResultValue(b, managed, nil)
				if err != nil {
					continue
				}
				if got := appendResultValue(nil, edges, emitted, managed, revs, state); string(got) != string(b) {
					t.Fatalf("result value %x (managed %v) encodes back to %x", b, managed, got)
				}
			}
		case 3:
			class, k, err := parseCursor(b)
			if err != nil {
				return
			}
			if got := appendCursor(nil, class, k); string(got) != string(b) {
				t.Fatalf("cursor %x encodes back to %x", b, got)
			}
		}
	})
}
