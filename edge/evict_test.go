package edge

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/operators"
)

const evictSpec = `name: evict
source: {mqtt: {topic: "plant/+/temp", qos: 1}}
event_time: {field: ts, unit: ms}
key: [device]
watermark: {max_out_of_order: 50ms}
window: {tumbling: 100ms}
allowed_lateness: 5s
aggregates: {n: count(), avg_temp: avg(temp), max_temp: max(temp)}
`

// writeEvictLog logs a stream over many devices: a hot set drifting
// through them, some readings of any device, some late by up to the
// lateness, and some repeats of a reading up to 4096 messages back (late
// for a fired window of a device that has most likely been evicted).
func writeEvictLog(t *testing.T, dir string, devices, records int) {
	t.Helper()
	ctx := context.Background()
	l, _, err := ingestlog.Open(ctx, filepath.Join(dir, "log"), &ingestlog.Options{Sync: ingestlog.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var rec []byte
	var past [4096][]byte // the latest payloads, for repeats
	now := int64(1_767_225_600_000)
	for i := range records {
		now += rng.Int64N(3)
		d := (i*devices/records + rng.IntN(200)) % devices
		if rng.IntN(20) == 0 {
			d = rng.IntN(devices)
		}
		ts := now - rng.Int64N(51)
		if rng.IntN(20) == 0 {
			ts = now - rng.Int64N(5100)
		}
		payload := fmt.Appendf(nil, `{"device":"d%06d","ts":%d,"temp":%d.5}`, d, ts, i%40)
		if old := past[rng.IntN(len(past))]; old != nil && rng.IntN(20) == 0 {
			// A repeat of a recent reading (no event_id: it counts
			// again), late for its window, of a device likely evicted.
			payload = old
		}
		past[i%len(past)] = payload
		rec = encodeRecord(rec[:0], "plant/north/temp", payload)
		if _, err := l.Append(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// runEvictNode runs a node over its logged stream, checkpointing every
// few ms. With crashAt > 0 it stops without a last checkpoint after that
// many messages (the in-memory state is lost, what was committed stays),
// then reopens and runs to the end. It returns the committed results, as
// sorted strings, and the runtime's stats of the last run.
func runEvictNode(t *testing.T, dir string, p *operators.Pipeline, maxResident int, crashAt int) ([]string, operators.Stats) {
	t.Helper()
	var stats operators.Stats
	run := func(crashAt int) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cfg := &NodeConfig{EdgeID: "evict", DataDir: dir, Pipelines: []*operators.Pipeline{p}, NoSync: true,
			CheckpointInterval: 2 * time.Millisecond, Runtime: operators.Options{MaxResident: maxResident}}
		n, err := open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		fed := 0
		n.onFeed = func([]byte) {
			if fed++; fed == crashAt {
				cancel()
			}
			// Checkpoints come on the interval's ticks: pausing the pump
			// every 1,000 messages for longer than an interval makes
			// sure that many commit during the run (evictions wait for
			// them). What is compared does not depend on it.
			if fed%1000 == 0 {
				time.Sleep(3 * time.Millisecond)
			}
		}
		done := make(chan error, 1)
		go func() { done <- n.writer(context.Background()) }()
		drain := make(chan struct{})
		close(drain)
		err = n.pump(ctx, drain)
		if crashAt > 0 && !errors.Is(err, context.Canceled) {
			t.Fatalf("pump: %v, want it cancelled", err)
		} else if crashAt == 0 && err != nil {
			t.Fatal(err)
		}
		stats = n.pipes[0].rt.Stats()
		if _, err := n.pipes[0].rt.Close(false); err != nil && crashAt == 0 {
			t.Fatal(err)
		}
		close(n.parts)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		n.log.Close(context.Background())
		n.store.Close()
	}
	if crashAt > 0 {
		run(crashAt)
	}
	run(0)
	var got []string
	err := ReadOutbox(context.Background(), dir, func(e OutboxEntry) error {
		if !e.Marker {
			r := e.Result
			got = append(got, fmt.Sprintf("%s [%d,%d) v%d %x", r.Key, r.Start, r.End, r.Version, r.State))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got, stats
}

// TestEvictionNode runs a node over a logged stream of many devices with
// state.max_resident_keys small, evicting to the state file and reloading
// from it (keyReader), once straight through and once with a crash half
// way: the committed results are exactly those of a node that keeps every
// key in memory.
func TestEvictionNode(t *testing.T) {
	const devices, records = 20_000, 100_000
	p, err := operators.CompileYAML("evict.yaml", []byte(evictSpec))
	if err != nil {
		t.Fatal(err)
	}
	dirs := [3]string{t.TempDir(), t.TempDir(), t.TempDir()}
	for _, d := range dirs {
		writeEvictLog(t, d, devices, records)
	}
	want, st := runEvictNode(t, dirs[0], p, 0, 0)
	if st.Evicted != 0 || len(want) == 0 {
		t.Fatalf("without eviction: %d results, %d evicted", len(want), st.Evicted)
	}
	for i, c := range []struct {
		name    string
		crashAt int
	}{{"straight", 0}, {"crash", records / 2}} {
		t.Run(c.name, func(t *testing.T) {
			got, st := runEvictNode(t, dirs[i+1], p, 400, c.crashAt)
			t.Logf("%d results; last run: evicted %d, reloaded %d, lookups %d, resident %d", len(got), st.Evicted, st.Reloaded, st.Lookups, st.Resident)
			if st.Evicted == 0 || st.Reloaded == 0 {
				t.Errorf("evicted %d, reloaded %d: eviction not exercised", st.Evicted, st.Reloaded)
			}
			if !slices.Equal(got, want) {
				extra, missing := diffSorted(got, want)
				t.Fatalf("%d results, want %d: %d not wanted (first %q), %d missing (first %q)", len(got), len(want), len(extra), first(extra), len(missing), first(missing))
			}
		})
	}
}

// diffSorted returns what is in a and not in b, and the other way round.
func diffSorted(a, b []string) (onlyA, onlyB []string) {
	for len(a) > 0 || len(b) > 0 {
		switch {
		case len(b) == 0 || len(a) > 0 && a[0] < b[0]:
			onlyA, a = append(onlyA, a[0]), a[1:]
		case len(a) == 0 || b[0] < a[0]:
			onlyB, b = append(onlyB, b[0]), b[1:]
		default:
			a, b = a[1:], b[1:]
		}
	}
	return onlyA, onlyB
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
