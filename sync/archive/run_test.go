package archive_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runnel-io/runnel/sync/archive"
	"github.com/runnel-io/runnel/sync/archive/archivetest"
)

// downStore fails every operation while down, counting the attempts.
type downStore struct {
	archive.Store
	down     atomic.Bool
	attempts atomic.Int64
}

var errDown = errors.New("store down")

func (d *downStore) fail() bool {
	d.attempts.Add(1)
	return d.down.Load()
}

func (d *downStore) Put(ctx context.Context, k string, r io.Reader, n int64) error {
	if d.fail() {
		return errDown
	}
	return d.Store.Put(ctx, k, r, n)
}

func (d *downStore) PutFile(ctx context.Context, k, p string) error {
	if d.fail() {
		return errDown
	}
	return d.Store.PutFile(ctx, k, p)
}

func (d *downStore) List(ctx context.Context, p string) ([]string, error) {
	if d.fail() {
		return nil, errDown
	}
	return d.Store.List(ctx, p)
}

// TestRunBacksOff: with the store down, Run retries after 1, 2, 4, 8, 8,
// ... seconds (less up to a quarter), counts the failures by cause, and
// archives everything once the store is back; time is synctest's.
func TestRunBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lg := archivetest.NewMemLog()
		lg.AddSchema(temps)
		for i := range 10 {
			r := archive.Row{Schema: temps.ID(), Start: base.UnixMilli(), End: base.UnixMilli() + 1000, Version: uint32(i + 1), Key: encKey("d", "1"),
				Values: []archive.Value{{Kind: archive.Int, Int: 1}, {}, {Kind: archive.Float, Float: 1}}}
			lg.Append(&r)
		}
		st := &downStore{Store: archivetest.NewMemStore()}
		st.down.Store(true)
		a, err := archive.New(archive.Options{Store: st, Log: lg, StagingDir: t.TempDir(), FlushInterval: time.Minute,
			MinBackoff: time.Second, MaxBackoff: 8 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { a.Run(ctx) })
		// Attempts at 0, ~1, ~3, ~7, ~15, ~23, ~31 s (each delay 3/4 to all of 1, 2, 4, 8, 8, 8 s).
		time.Sleep(30500 * time.Millisecond)
		synctest.Wait()
		if n := st.attempts.Load(); n < 6 || n > 9 {
			t.Fatalf("%d attempts in 30.5 s of back-off from 1 s to 8 s", n)
		}
		s := a.Status()
		if s.Failures["store"] < 6 || s.Pending != 10 || !strings.Contains(s.LastError, "store down") {
			t.Fatalf("status with the store down: %+v", s)
		}
		st.down.Store(false)
		time.Sleep(9 * time.Second) // the next retry, at most 8 s away
		synctest.Wait()
		if s := a.Status(); s.Pending != 0 || s.Totals.Rows != 10 {
			t.Fatalf("status once the store is back: %+v", s)
		}
		// Then the flush interval: one wake-up a minute, Kick sooner.
		n := st.attempts.Load()
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if m := st.attempts.Load(); m != n {
			t.Fatalf("%d store operations within the flush interval with nothing to do", m-n)
		}
		r := archive.Row{Schema: temps.ID(), Start: base.UnixMilli(), End: base.UnixMilli() + 1000, Version: 11, Key: encKey("d", "1"),
			Values: []archive.Value{{Kind: archive.Int, Int: 1}, {}, {Kind: archive.Float, Float: 1}}}
		lg.Append(&r)
		a.Kick()
		synctest.Wait()
		if s := a.Status(); s.Pending != 0 || s.Totals.Rows != 11 {
			t.Fatalf("status after a Kick: %+v", s)
		}
		cancel()
		wg.Wait()
	})
}

// TestRetentionAndGC: superseded files and manifests are deleted after
// the grace, so the store holds only what the latest manifests name; past
// the retention a partition goes, manifests first; a late result of a
// partition already past it is counted, not archived.
func TestRetentionAndGC(t *testing.T) {
	st, lg, clk := archivetest.NewMemStore(), archivetest.NewMemLog(), &clock{}
	dir := t.TempDir()
	var a *archive.Archiver
	mk := func(retention time.Duration) *archive.Archiver {
		o := options(st, lg, dir, clk)
		o.Retention = retention
		var err error
		if a, err = archive.New(o); err != nil {
			t.Fatal(err)
		}
		return a
	}
	rows := scenario(t, 5, lg, clk, func() *archive.Archiver { return mk(0) })
	check(t, st, rows)
	ctx := context.Background()
	ms, err := archive.Live(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range ms {
		named[archive.ManifestKey(m.Partition(), m.Generation)] = true
		for _, f := range m.Files {
			named[f.Path] = true
		}
	}
	keys, _ := st.List(ctx, "")
	for _, k := range keys {
		if !named[k] {
			t.Errorf("%s is in the store past the grace, named by no current manifest", k)
		}
	}

	// Retention of 2 h at base+4h30: the partitions of hours 0 and 1 (ended
	// at base+1h and +2h) go, hour 2's (ended +3h) stays.
	clk.Set(base.Add(4*time.Hour + 30*time.Minute))
	a = mk(2 * time.Hour)
	if err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	keys, _ = st.List(ctx, "")
	for _, k := range keys {
		if !strings.Contains(k, "/hour=12/") {
			t.Fatalf("%s left past the retention", k)
		}
	}
	if len(keys) == 0 {
		t.Fatal("retention deleted the partition within it too")
	}
	s := a.Status()
	if s.Partitions != 2 || s.Totals.Deleted != 4 {
		t.Fatalf("after retention: %+v", s)
	}
	// A late version of a deleted hour: counted, not archived.
	r := archive.Row{Schema: temps.ID(), Start: base.UnixMilli(), End: base.UnixMilli() + 600_000, Version: 99, Key: encKey("d0", "0"),
		Values: []archive.Value{{Kind: archive.Int, Int: 1}, {}, {Kind: archive.Float, Float: 1}}}
	lg.Append(&r)
	if err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if s := a.Status(); s.Totals.Expired != 1 || s.Pending != 0 {
		t.Fatalf("a late result past the retention: %+v", s)
	}
	if keys2, _ := st.List(ctx, ""); len(keys2) != len(keys) {
		t.Fatalf("a result past the retention was archived: %d objects, were %d", len(keys2), len(keys))
	}
}

// TestInvalidRowsSetAside: a result the archive cannot hold (a key not in
// the operators' encoding, a value of the wrong type, an unknown schema's
// fields) is counted and skipped; the results behind it are archived.
func TestInvalidRowsSetAside(t *testing.T) {
	st, lg, clk := archivetest.NewMemStore(), archivetest.NewMemLog(), &clock{}
	clk.Set(base.Add(time.Hour))
	lg.AddSchema(temps)
	good := func(v uint32) archive.Row {
		return archive.Row{Schema: temps.ID(), Start: base.UnixMilli(), End: base.UnixMilli() + 1000, Version: v, Key: encKey("d", "1"),
			Values: []archive.Value{{Kind: archive.Int, Int: 1}, {}, {Kind: archive.Float, Float: 1}}}
	}
	var rows []archive.Row
	for i, bad := range []func(*archive.Row){
		func(r *archive.Row) { r.Key = []byte("garbage") },
		func(r *archive.Row) { r.Values[0] = archive.Value{Kind: archive.Float, Float: 1} },
		func(r *archive.Row) { r.Values = r.Values[:1] },
	} {
		r := good(uint32(2*i + 1))
		bad(&r)
		lg.Append(&r)
		r = good(uint32(2*i + 2))
		lg.Append(&r)
		rows = append(rows, r)
	}
	a, err := archive.New(options(st, lg, t.TempDir(), clk))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := a.Status(); s.Totals.Invalid != 3 || s.Totals.Rows != 3 || s.Pending != 0 {
		t.Fatalf("status: %+v", s)
	}
	check(t, st, rows)
}
