package operators_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runnel-io/runnel/operators"
)

type emptyStore struct{}

func (emptyStore) Load(uint64, []byte, func([]byte, []byte) error) error { return nil }

// startBudget starts a Runtime of one worker whose keys are held for an
// hour's window, bounded to 100 resident keys; closed with the test.
func startBudget(t *testing.T) *operators.Runtime {
	t.Helper()
	p, err := operators.CompileYAML("budget.yaml", []byte(`name: budget
source: {mqtt: {topic: "t", qos: 1}}
event_time: {field: ts, unit: ms}
key: [dev]
window: {tumbling: 1h}
aggregates: {n: count()}
`))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := operators.Start(context.Background(), p, newCollect(p),
		operators.Options{Workers: 1, BatchSize: 16, MaxResident: 100, KeyStore: emptyStore{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(false) })
	return rt
}

// TestBudget: a Runtime whose keys are all held for a window still to
// fire asks for one early checkpoint, waits while it is in flight and,
// since its commit lets no key go, stops asking until the keys are within
// the bound.
func TestBudget(t *testing.T) {
	rt := startBudget(t)
	ingest := func(from, to int) {
		for i := from; i < to; i++ {
			if err := rt.Ingest(fmt.Appendf(nil, `{"dev":"d%d","ts":1767225600000}`, i), "t", int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := rt.Flush(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for rt.Stats().Resident < uint64(to) {
			if time.Now().After(deadline) {
				t.Fatalf("resident %d, want %d", rt.Stats().Resident, to)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if got := rt.Budget(); got != operators.BudgetOK {
		t.Fatalf("no keys: %v", got)
	}
	ingest(0, 125)
	if got := rt.Budget(); got != operators.BudgetOK {
		t.Fatalf("125 keys of a bound of 100: %v, want OK (a checkpoint past a quarter again)", got)
	}
	ingest(125, 130)
	if got := rt.Budget(); got != operators.BudgetCheckpoint {
		t.Fatalf("130 keys of a bound of 100: %v, want a checkpoint", got)
	}
	if err := rt.Barrier(1); err != nil {
		t.Fatal(err)
	}
	ingest(130, 150)
	if got := rt.Budget(); got != operators.BudgetOK {
		t.Fatalf("150 keys, checkpoint in flight: %v, want OK (a wait past half again)", got)
	}
	ingest(150, 160)
	if got := rt.Budget(); got != operators.BudgetWait {
		t.Fatalf("160 keys, checkpoint in flight: %v, want to wait", got)
	}
	signal := rt.CommitSignal()
	rt.Committed(1)
	select {
	case <-signal:
	default:
		t.Fatal("Committed did not signal")
	}
	// The worker has had no batch since the commit: not judged yet.
	if got := rt.Budget(); got != operators.BudgetOK {
		t.Fatalf("committed, not yet seen by the worker: %v, want OK", got)
	}
	// A batch of known keys after it: no key was evictable (their window
	// is still open), so no more early checkpoints, however many keys.
	ingest(0, 160)
	ingest(160, 400)
	if got := rt.Budget(); got != operators.BudgetOK {
		t.Fatalf("after a checkpoint that let no key go: %v, want OK", got)
	}
	if st := rt.Stats(); st.Evicted != 0 {
		t.Fatalf("%d keys evicted with their window open", st.Evicted)
	}
}

// TestBudgetAsksAgain: a checkpoint asked for that the source put off
// (no barrier came) is asked for again, not taken for one that let no key
// go.
func TestBudgetAsksAgain(t *testing.T) {
	rt := startBudget(t)
	for i := range 160 {
		if err := rt.Ingest(fmt.Appendf(nil, `{"dev":"d%d","ts":1767225600000}`, i), "t", int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); rt.Stats().Resident < 160; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("resident %d, want 160", rt.Stats().Resident)
		}
	}
	for i := range 3 {
		if got := rt.Budget(); got != operators.BudgetCheckpoint {
			t.Fatalf("call %d, no barrier since the first: %v, want a checkpoint", i, got)
		}
	}
}

// TestRestoreWantsGroupsTogether: with eviction, a restore sheds keys
// between key groups, so entries of a group met again after another's are
// refused; without eviction the order is free.
func TestRestoreWantsGroupsTogether(t *testing.T) {
	p, err := operators.CompileYAML("restore.yaml", []byte(`name: restore
source: {mqtt: {topic: "t", qos: 1}}
event_time: {field: ts, unit: ms}
key: [dev]
window: {tumbling: 1s}
aggregates: {n: count()}
`))
	if err != nil {
		t.Fatal(err)
	}
	load := func(fn func(uint64, []byte, []byte) error) error {
		for _, e := range []struct {
			hash uint64
			key  string
		}{{1, "va"}, {2, "vb"}, {1 + 128, "vc"}} { // groups 1, 2, 1 of 128
			if err := fn(e.hash, []byte(e.key), []byte{0}); err != nil { // no remembered versions
				return err
			}
		}
		return nil
	}
	for _, evict := range []bool{false, true} {
		opts := operators.Options{Workers: 1, KeyGroups: 128, Restore: load}
		if evict {
			opts.MaxResident, opts.KeyStore = 100, emptyStore{}
		}
		rt, err := operators.Start(context.Background(), p, newCollect(p), opts)
		if evict {
			if !errors.Is(err, operators.ErrBadSnapshot) {
				t.Fatalf("with eviction: %v, want ErrBadSnapshot", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("without eviction: %v", err)
		}
		rt.Close(false)
	}
}
