package ingestlog_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/ingestlog/faultfs"
)

// TestCrash is the power-loss property: run the log on the fault-injecting
// filesystem, lose power at a random operation (unsynced bytes dropped, or
// kept up to a write torn at a random byte), reboot and reopen, several
// times over. After every reopen:
//
//   - Open succeeds: a power loss is never reported as corruption;
//   - every record reported durable before any crash is there, byte for
//     byte, at its position;
//   - what is there is exactly a prefix of what was appended: nothing after
//     a torn record, nothing invented;
//   - positions continue where the recovered log ends.
func TestCrash(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		fsys := faultfs.New(rapid.Uint64().Draw(rt, "seed"))
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "records"), 1))
		opts := ingestlog.Options{
			FS:            fsys,
			SegmentSize:   rapid.SampledFrom([]int64{1 << 10, 4 << 10, 64 << 10}).Draw(rt, "segment"),
			Sync:          rapid.SampledFrom([]ingestlog.SyncPolicy{ingestlog.SyncGroup, ingestlog.SyncAlways}).Draw(rt, "sync"),
			Compression:   rapid.SampledFrom([]ingestlog.Compression{ingestlog.CompressionNone, ingestlog.CompressionZstd}).Draw(rt, "compression"),
			GroupBytes:    rapid.SampledFrom([]int{512, 4 << 10, 64 << 10}).Draw(rt, "groupBytes"),
			GroupDelay:    time.Duration(rapid.IntRange(10, 500).Draw(rt, "groupDelayMicros")) * time.Microsecond,
			MaxRecordSize: 8 << 10,
			MaxUnsynced:   rapid.SampledFrom([]int{64 << 10, 256 << 10}).Draw(rt, "maxUnsynced"),
		}
		maxRec := rapid.SampledFrom([]int{0, 50, 2000, 8 << 10}).Draw(rt, "maxRecord")
		var model [][]byte             // every record appended, by position
		var durable ingestlog.Position // highest durable end reported before a crash

		cycles := rapid.IntRange(1, 4).Draw(rt, "cycles")
		for c := 0; c <= cycles; c++ {
			var reported atomic.Uint64
			o := opts
			o.OnDurable = func(upTo ingestlog.Position) { reported.Store(uint64(upTo)) }
			l, rec, err := ingestlog.Open(ctx, logDir, &o)
			if err != nil {
				rt.Fatalf("cycle %d: Open after power loss: %v", c, err)
			}
			if rec.End < durable || int(rec.End) > len(model) {
				l.Close(ctx)
				rt.Fatalf("cycle %d: recovered end %d; %d records were durable, %d appended (%+v)", c, rec.End, durable, len(model), rec)
			}
			got, err := readAll(l, rec.First)
			if err != nil {
				l.Close(ctx)
				rt.Fatalf("cycle %d: read: %v", c, err)
			}
			if int(rec.First)+len(got) != int(rec.End) {
				l.Close(ctx)
				rt.Fatalf("cycle %d: read %d records from %d, Recovery says end %d", c, len(got), rec.First, rec.End)
			}
			checkRecords(rt, got, model[rec.First:rec.End], rec.First)
			model = model[:rec.End]
			if c == cycles {
				mustClose(rt, l)
				return
			}

			mode := rapid.SampledFrom([]faultfs.CrashMode{faultfs.DropUnsynced, faultfs.TearUnsynced, faultfs.TearUnsyncedZeros}).Draw(rt, "mode")
			if rapid.Bool().Draw(rt, "keepDirChanges") {
				mode |= faultfs.KeepDirChanges
			}
			fsys.CrashAfter(rapid.IntRange(1, 120).Draw(rt, "crashAfter"), mode)
			n := rapid.IntRange(0, 80).Draw(rt, "appends")
			for range n {
				r := record(rng, maxRec)
				p, err := l.Append(ctx, r)
				if err != nil {
					if !errors.Is(err, ingestlog.ErrFailed) {
						rt.Fatalf("Append: %v, want ErrFailed after the crash", err)
					}
					break
				}
				if int(p) != len(model) {
					rt.Fatalf("Append got position %d, want %d", p, len(model))
				}
				model = append(model, r)
				switch rng.IntN(10) {
				case 0:
					_ = l.WaitDurable(ctx, p)
				case 1:
					_ = l.DeleteBefore(ingestlog.Position(rng.IntN(int(l.Durable()) + 1)))
				}
			}
			_ = l.Close(ctx)
			durable = max(durable, ingestlog.Position(reported.Load()))
			if !fsys.Crashed() {
				fsys.Crash(mode)
			}
			fsys.Reboot()
		}
	})
}
