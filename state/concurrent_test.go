package state_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/runnel-io/runnel/state"
)

// TestConcurrentHandoff runs workers that each own a set of key groups and
// Put, Delete, Get and Scan in them, against a committer that keeps taking
// handoffs (all groups at once, or per worker and joined) and writing them
// on yet another goroutine. Each worker checks its reads against its own
// model as it goes; at the end the store, and the file after a reopen, must
// equal the union of the models.
func TestConcurrentHandoff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache int64
		join  bool
	}{
		{"big-cache", 1 << 30, false},
		{"tiny-cache", 1, false},
		{"tiny-cache-joined", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const (
				workers = 4
				groups  = 16
				ops     = 3000
			)
			s, path := tempStore(t, testOpts(groups, tc.cache))
			n := nsT(t, s, "window/c")
			models := make([]map[int]map[string]string, workers)
			var wg sync.WaitGroup
			var stop atomic.Bool
			errc := make(chan error, workers+1)
			for w := range workers {
				models[w] = map[int]map[string]string{}
				wg.Go(func() {
					if err := worker(n, w, workers, groups, ops, models[w]); err != nil {
						errc <- fmt.Errorf("worker %d: %w", w, err)
					}
				})
			}
			var commits atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				for !stop.Load() {
					h, err := takeHandoff(s, tc.join, workers, groups)
					if err != nil {
						errc <- err
						return
					}
					// Write on another goroutine while the workers keep going.
					res := make(chan error, 1)
					go func() {
						_, err := h.Write(nil)
						res <- err
					}()
					if err := <-res; err != nil {
						errc <- err
						return
					}
					commits.Add(1)
				}
			}()
			wg.Wait()
			stop.Store(true)
			<-done
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			if _, err := s.Commit(nil); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d commits ran alongside %d workers", commits.Load(), workers)
			checkModels(t, n, groups, workers, models)
			s.Close()
			s2 := openT(t, path, testOpts(groups, tc.cache))
			defer s2.Close()
			checkModels(t, nsT(t, s2, "window/c"), groups, workers, models)
		})
	}
}

func takeHandoff(s *state.Store, join bool, workers, groups int) (*state.Handoff, error) {
	if !join {
		return s.BeginCommit()
	}
	// Groups are owned round-robin, but BeginCommitGroups takes ranges:
	// take quarters and join them, as a checkpoint writer would.
	var h *state.Handoff
	step := groups / workers
	for lo := 0; lo < groups; lo += step {
		p, err := s.BeginCommitGroups(lo, lo+step)
		if err != nil {
			return nil, err
		}
		if h == nil {
			h = p
		} else if err := h.Join(p); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func worker(n *state.Namespace, w, workers, groups, ops int, m map[int]map[string]string) error {
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	var own []int
	for g := w; g < groups; g += workers {
		own = append(own, g)
		m[g] = map[string]string{}
	}
	for i := range ops {
		g := own[rng.IntN(len(own))]
		key := fmt.Sprintf("k%02d", rng.IntN(40))
		switch r := rng.IntN(10); {
		case r < 5:
			v := fmt.Sprintf("w%d-%d", w, i)
			if err := n.Put(g, []byte(key), []byte(v)); err != nil {
				return err
			}
			m[g][key] = v
		case r < 6:
			if err := n.Delete(g, []byte(key)); err != nil {
				return err
			}
			delete(m[g], key)
		case r < 9:
			v, ok, err := n.Get(g, []byte(key))
			if err != nil {
				return err
			}
			if want, wantOK := m[g][key]; ok != wantOK || string(v) != want {
				return fmt.Errorf("op %d: Get(%d, %s) = %q, %v; want %q, %v", i, g, key, v, ok, want, wantOK)
			}
		default:
			var got []kv
			if err := n.Scan(g, func(k, v []byte) error {
				got = append(got, kv{string(k), string(v)})
				return nil
			}); err != nil {
				return err
			}
			if want := sortedKV(m[g], ""); !slices.Equal(got, want) {
				return fmt.Errorf("op %d: Scan(%d) = %v; want %v", i, g, got, want)
			}
		}
	}
	return nil
}

func checkModels(t *testing.T, n *state.Namespace, groups, workers int, models []map[int]map[string]string) {
	t.Helper()
	for g := range groups {
		want := sortedKV(models[g%workers][g], "")
		if got := scanAll(t, n, g, nil); !slices.Equal(got, want) {
			t.Fatalf("group %d: Scan = %v; want %v", g, got, want)
		}
		for _, e := range want {
			if v, ok := mustGet(t, n, g, e.k); !ok || v != e.v {
				t.Fatalf("group %d: Get(%s) = %q, %v; want %q", g, e.k, v, ok, e.v)
			}
		}
	}
}

// TestPutDuringWrite pins the rule that a Put made while a handoff is being
// written wins over the handoff's value, in the cache at once and on disk
// after the next commit.
func TestPutDuringWrite(t *testing.T) {
	s, path := tempStore(t, testOpts(4, 1))
	n := nsT(t, s, "ns")
	mustPut(t, n, 1, "k", "old")
	h, err := s.BeginCommit()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.BeginCommitGroups(1, 2); !errors.Is(err, state.ErrInFlight) {
		t.Fatalf("second BeginCommit of group 1: %v, want ErrInFlight", err)
	}
	mustPut(t, n, 1, "k", "new")
	if _, err := h.Write(func(tx *state.Tx) error {
		// Inside the transaction the cache already answers "new".
		if v, _ := mustGet(t, n, 1, "k"); v != "new" {
			t.Errorf("Get during Write = %q, want new", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if v, _ := mustGet(t, n, 1, "k"); v != "new" {
		t.Fatalf("Get after Write = %q, want new", v)
	}
	if st := s.Stats(); st.DirtyBytes == 0 {
		t.Fatalf("the later Put should still be dirty: %+v", st)
	}
	s.Close()
	s2 := openT(t, path, testOpts(4, 1))
	if v, _ := mustGet(t, nsT(t, s2, "ns"), 1, "k"); v != "old" {
		t.Fatalf("after reopen without a second commit: %q, want old", v)
	}
	mustPut(t, nsT(t, s2, "ns"), 1, "k", "newer")
	if _, err := s2.Commit(nil); err != nil {
		t.Fatal(err)
	}
	s2.Close()
	s3 := openT(t, path, testOpts(4, 1))
	defer s3.Close()
	if v, _ := mustGet(t, nsT(t, s3, "ns"), 1, "k"); v != "newer" {
		t.Fatalf("after second commit: %q, want newer", v)
	}
}
