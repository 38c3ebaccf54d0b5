package archive_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/runnel-io/runnel/sync/archive"
	"github.com/runnel-io/runnel/sync/archive/archivetest"
)

// A scenario is a random stream of result versions in phases, the way a
// hub emits them: first versions, then late corrections of some windows,
// then more after the clock has passed the hours (so they are compacted
// between phases).

var (
	temps = &archive.Schema{Pipeline: "temps", Keys: []string{"device", "line"}, Aggregates: []archive.Aggregate{
		{Name: "readings", Type: archive.Int}, {Name: "avg_temp", Type: archive.Float}, {Name: "version", Type: archive.Float}}}
	flow = &archive.Schema{Pipeline: "flow", Class: 3, Keys: []string{"site"}, Aggregates: []archive.Aggregate{
		{Name: "total", Type: archive.Float}, {Name: "sites", Type: archive.Int}}}
)

// base is the hour the scenario's windows start in: 2026-03-01T10:00Z.
var base = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func encKey(fields ...string) []byte {
	var k []byte
	for _, f := range fields {
		kind := byte('s')
		if _, err := strconv.ParseFloat(f, 64); err == nil && f != "" && f[0] != '+' && f != "Inf" && f != "NaN" {
			kind = 'n'
		}
		k = append(k, kind)
		k = binary.AppendUvarint(k, uint64(len(f)))
		k = append(k, f...)
	}
	return k
}

type gen struct {
	rng      *rand.Rand
	versions map[string]uint32
	rows     []archive.Row
}

func (g *gen) row(phase int) archive.Row {
	s, sid := temps, temps.ID()
	if g.rng.IntN(3) == 0 {
		s, sid = flow, flow.ID()
	}
	var key []byte
	if s == temps {
		key = encKey(fmt.Sprintf("d%d", g.rng.IntN(5)), strconv.Itoa(g.rng.IntN(3)))
	} else {
		key = encKey([]string{"plant \"north\"", "süd", "w\x00x"}[g.rng.IntN(3)])
	}
	hour := g.rng.IntN(3)
	if phase == 2 {
		hour = g.rng.IntN(2) // late corrections of closed hours
	}
	start := base.Add(time.Duration(hour)*time.Hour + time.Duration(g.rng.IntN(6))*10*time.Minute).UnixMilli()
	id := fmt.Sprintf("%x/%d/%x", sid, start, key)
	g.versions[id]++
	r := archive.Row{Schema: sid, Start: start, End: start + 600_000, Version: g.versions[id], Edges: uint32(1 + g.rng.IntN(4)),
		Emitted: base.Add(3 * time.Hour).UnixMilli(), Key: key}
	if s == flow {
		r.Revisions = []uint32{3, 4}[:1+g.rng.IntN(2)]
		r.Values = []archive.Value{{Kind: archive.Float, Float: g.rng.Float64() * 100}, {Kind: archive.Int, Int: int64(g.rng.IntN(9))}}
	} else {
		avg := archive.Value{Kind: archive.Float, Float: g.rng.NormFloat64()}
		switch g.rng.IntN(8) {
		case 0:
			avg = archive.Value{}
		case 1:
			avg.Float = math.NaN()
		case 2:
			avg.Float = math.Inf(-1)
		}
		r.Values = []archive.Value{{Kind: archive.Int, Int: int64(g.rng.IntN(1000))}, avg, {Kind: archive.Float, Float: float64(r.Version)}}
	}
	return r
}

// scenario runs the phases against st and lg, making an archiver with mk
// whenever it needs one (at the start and after each failed step, which
// it takes as a crash); it returns the rows logged.
func scenario(t *testing.T, seed uint64, lg *archivetest.MemLog, clk *clock, mk func() *archive.Archiver) []archive.Row {
	t.Helper()
	g := &gen{rng: rand.New(rand.NewPCG(seed, 1)), versions: map[string]uint32{}}
	lg.AddSchema(temps)
	lg.AddSchema(flow)
	ar := mk()
	ctx := context.Background()
	logRows := func(n, phase int) {
		for range n {
			r := g.row(phase)
			lg.Append(&r)
			g.rows = append(g.rows, r)
		}
	}
	step := func() {
		for tries := 0; ; tries++ {
			err := ar.Step(ctx)
			if err == nil {
				return
			}
			if tries > 3 {
				t.Fatalf("step keeps failing: %v", err)
			}
			// A crash: the hub goes on committing results while the
			// archiver restarts from the durable state.
			logRows(3, 1)
			ar = mk()
		}
	}
	clk.Set(base.Add(3 * time.Hour))
	logRows(40, 1)
	step()
	logRows(30, 1)
	step()
	logRows(25, 2) // late versions of hours 0 and 1
	clk.Set(base.Add(5 * time.Hour))
	for range 8 { // appends, then a compaction a step
		step()
	}
	logRows(20, 2) // more late versions: into compacted partitions
	step()
	clk.Set(base.Add(6 * time.Hour))
	for range 8 {
		step()
	}
	clk.Set(base.Add(7 * time.Hour)) // past the grace of the superseded files
	step()
	return g.rows
}

type ident struct {
	pipeline string
	class    uint32
	key      string
	start    int64
	end      int64
	version  uint32
}

func identOf(r archive.Record) ident {
	return ident{r.Pipeline, r.Class, r.Key, r.Start, r.End, r.Version}
}

// archived lists the archive through its manifests and returns every
// record, failing on a file missing, partial or listed twice, a row twice,
// or a compacted file out of order.
func archived(t *testing.T, st archive.Store) map[ident]archive.Record {
	t.Helper()
	ctx := context.Background()
	ms, err := archive.Live(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[ident]archive.Record{}
	files := map[string]bool{}
	for _, m := range ms {
		for _, f := range m.Files {
			if files[f.Path] {
				t.Fatalf("file %s in two manifests", f.Path)
			}
			files[f.Path] = true
			rc, err := st.Get(ctx, f.Path)
			if err != nil {
				t.Fatalf("manifest %s generation %d names %s: %v", m.Partition(), m.Generation, f.Path, err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if int64(len(b)) != f.Bytes {
				t.Fatalf("%s: %d bytes, the manifest says %d", f.Path, len(b), f.Bytes)
			}
			_, recs, err := archive.ReadFile(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatalf("%s: %v", f.Path, err)
			}
			if int64(len(recs)) != f.Rows {
				t.Fatalf("%s: %d rows, the manifest says %d", f.Path, len(recs), f.Rows)
			}
			for i, r := range recs {
				if archive.PartitionOf(r.Pipeline, r.Start) != m.Partition() {
					t.Fatalf("%s: a row of window %d in partition %s", f.Path, r.Start, m.Partition())
				}
				id := identOf(r)
				if _, dup := got[id]; dup {
					t.Fatalf("%+v archived twice (again in %s)", id, f.Path)
				}
				got[id] = r
				if f.Sorted && i > 0 && !before(recs[i-1], r) {
					t.Fatalf("%s is marked sorted, row %d is not after row %d", f.Path, i, i-1)
				}
			}
		}
	}
	return got
}

func before(a, b archive.Record) bool {
	return cmpRec(a, b) < 0
}

func cmpRec(a, b archive.Record) int {
	if a.Class != b.Class {
		return int(a.Class) - int(b.Class)
	}
	if c := bytes.Compare([]byte(a.Key), []byte(b.Key)); c != 0 {
		return c
	}
	switch {
	case a.Start != b.Start:
		return cmpInt(a.Start, b.Start)
	case a.End != b.End:
		return cmpInt(a.End, b.End)
	}
	return cmpInt(int64(a.Version), int64(b.Version))
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sameRecord(a, b archive.Record) bool {
	if a.Pipeline != b.Pipeline || a.Class != b.Class || a.Key != b.Key || !slices.Equal(a.Fields, b.Fields) ||
		a.Start != b.Start || a.End != b.End || a.Version != b.Version || a.Edges != b.Edges ||
		a.Emitted != b.Emitted || !slices.Equal(a.Revisions, b.Revisions) || len(a.Values) != len(b.Values) {
		return false
	}
	for i := range a.Values {
		x, y := a.Values[i], b.Values[i]
		if x.Kind != y.Kind || x.Int != y.Int || !(x.Float == y.Float || math.IsNaN(x.Float) && math.IsNaN(y.Float)) {
			return false
		}
	}
	return true
}

// check compares the archive with the rows logged: every one once, as
// logged.
func check(t *testing.T, st archive.Store, rows []archive.Row) {
	t.Helper()
	got := archived(t, st)
	schemas := map[uint64]*archive.Schema{temps.ID(): temps, flow.ID(): flow}
	for _, r := range rows {
		want, err := archive.RecordOf(schemas[r.Schema], &r)
		if err != nil {
			t.Fatal(err)
		}
		g, ok := got[identOf(want)]
		if !ok {
			t.Fatalf("%+v missing from the archive", identOf(want))
		}
		if !sameRecord(g, want) {
			t.Fatalf("archived %+v\nlogged   %+v", g, want)
		}
		delete(got, identOf(want))
	}
	for id := range got {
		t.Fatalf("%+v archived, never logged", id)
	}
}

func options(st archive.Store, lg archive.Log, dir string, clk *clock) archive.Options {
	return archive.Options{Store: st, Log: lg, StagingDir: dir, MaxRowsPerFile: 16, MaxRowsPerFlush: 50,
		CompactionDelay: 30 * time.Minute, CompactionMemory: 1 << 20, Grace: 10 * time.Minute, Now: clk.Now,
		Logger: slog.New(slog.DiscardHandler)}
}

// TestScenario is the oracle comparison without faults.
func TestScenario(t *testing.T) {
	for seed := range uint64(5) {
		st, lg, clk := archivetest.NewMemStore(), archivetest.NewMemLog(), &clock{}
		dir := t.TempDir()
		rows := scenario(t, seed, lg, clk, func() *archive.Archiver {
			a, err := archive.New(options(st, lg, dir, clk))
			if err != nil {
				t.Fatal(err)
			}
			return a
		})
		check(t, st, rows)
		if n := lg.Len(); n != 0 {
			t.Errorf("seed %d: %d log entries left after everything was archived", seed, n)
		}
		ms, _ := archive.Live(context.Background(), st, "")
		compacted := 0
		for _, m := range ms {
			if m.Cause == "compact" {
				compacted++
			}
		}
		if compacted < 4 {
			t.Errorf("seed %d: %d partitions end compacted, want the 6 closed ones or most", seed, compacted)
		}
	}
}

// TestCrashAtEveryStep fails each store operation of the scenario in
// turn (before it is done, and after it is done with its answer lost),
// and each state save (before and after it is durable), restarts the
// archiver from the durable state, and checks the archive against the
// log: no result missing, none twice, no manifest naming a missing or
// partial file.
func TestCrashAtEveryStep(t *testing.T) {
	const seed = 7
	clean := &archivetest.FaultStore{Store: archivetest.NewMemStore()}
	cleanLog := archivetest.NewMemLog()
	dir := t.TempDir()
	clk := &clock{}
	scenario(t, seed, cleanLog, clk, func() *archive.Archiver {
		a, err := archive.New(options(clean, cleanLog, dir, clk))
		if err != nil {
			t.Fatal(err)
		}
		return a
	})
	ops, saves := clean.Ops(), cleanLog.Saves()
	t.Logf("the scenario makes %d store operations and %d state saves", ops, saves)
	if ops < 50 || saves < 10 {
		t.Fatalf("a scenario of %d operations and %d saves exercises too little", ops, saves)
	}
	run := func(t *testing.T, fs *archivetest.FaultStore, lg *archivetest.MemLog) {
		clk := &clock{}
		dir := t.TempDir()
		crashes := 0
		rows := scenario(t, seed, lg, clk, func() *archive.Archiver {
			crashes++
			var st archive.Store = fs
			if crashes > 1 {
				st = fs.Store // after the crash, no more faults
			}
			a, err := archive.New(options(st, lg, dir, clk))
			if err != nil {
				t.Fatal(err)
			}
			return a
		})
		check(t, fs.Store, rows)
	}
	// Every crash point with RUNNEL_CRASH_ALL=1; otherwise every second
	// (every eighth under -race or -short, where make test runs it beside
	// every other package's tests), which ones chosen by the clock, so
	// that repeated runs visit them all.
	stride := 2
	if raceEnabled || testing.Short() {
		stride = 8
	}
	if os.Getenv("RUNNEL_CRASH_ALL") != "" {
		stride = 1
	}
	offset := int(time.Now().UnixNano() % int64(stride))
	t.Logf("visiting the crash points k with k mod %d = %d", stride, offset)
	for _, after := range []bool{false, true} {
		for k := 1; k <= ops; k++ {
			if k%stride != offset%stride {
				continue
			}
			t.Run(fmt.Sprintf("store-op=%d/after=%v", k, after), func(t *testing.T) {
				run(t, &archivetest.FaultStore{Store: archivetest.NewMemStore(), FailAt: k, After: after}, archivetest.NewMemLog())
			})
		}
		for k := 2; k <= saves; k++ { // save 1 is New's first
			if k%stride != offset%stride {
				continue
			}
			t.Run(fmt.Sprintf("save=%d/after=%v", k, after), func(t *testing.T) {
				lg := archivetest.NewMemLog()
				lg.FailSaveAt, lg.SaveAfter = k, after
				run(t, &archivetest.FaultStore{Store: archivetest.NewMemStore()}, lg)
			})
		}
	}
}

var _ = errors.New
