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
	}
	for _, b := range seeds {
		data, err := proto.Marshal(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	th := newTestHub(f, nil)
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
