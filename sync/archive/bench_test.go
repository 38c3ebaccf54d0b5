package archive

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
)

// lineTemps is the README pipeline's schema: per device, one-minute
// windows of five aggregates.
var lineTemps = &Schema{Pipeline: "line-temps", Keys: []string{"device"}, Aggregates: []Aggregate{
	{Name: "readings", Type: Int}, {Name: "avg_temp", Type: Float}, {Name: "max_temp", Type: Float},
	{Name: "p95_temp", Type: Float}, {Name: "devices_seen", Type: Int}}}

// benchRows returns n results as the hub emits them: 5,000 devices, one
// window a minute each, in emission order (window by window), a tenth of
// them late corrections (version 2).
func benchRows(n int) []Row {
	rng := rand.New(rand.NewPCG(1, 2))
	id := lineTemps.ID()
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC).UnixMilli()
	rows := make([]Row, n)
	for i := range rows {
		dev := "dev-" + strconv.Itoa(i%5000)
		key := append([]byte{'s', byte(len(dev))}, dev...)
		start := base + int64(i/5000)*60_000
		v := uint32(1)
		if rng.IntN(10) == 0 {
			v = 2
		}
		t := 21 + rng.NormFloat64()*2
		rows[i] = Row{Schema: id, Start: start, End: start + 60_000, Version: v, Edges: 1 + uint32(rng.IntN(3)),
			Emitted: start + 65_000 + int64(rng.IntN(1000)), Key: key, Values: []Value{
				{Kind: Int, Int: 60}, {Kind: Float, Float: t}, {Kind: Float, Float: t + 3}, {Kind: Float, Float: t + 2.5}, {Kind: Int, Int: 1}}}
	}
	return rows
}

// writeEntries turns encoded log entries into a Parquet file on w, the way
// an append does: decode, build, write in batches.
func writeEntries(w io.Writer, fs *fileSchema, entries [][]byte, rows []parquet.Row, b *rowBuilder, r *Row) error {
	pw := newWriter(w, fs)
	rows = rows[:0]
	for _, e := range entries {
		if err := DecodeEntry(e, r); err != nil {
			return err
		}
		var pr parquet.Row
		if n := len(rows); n < cap(rows) {
			pr = rows[:n+1][n][:0]
		}
		pr, err := b.build(pr, r)
		if err != nil {
			return err
		}
		rows = append(rows, pr)
		if len(rows) == writeBatch {
			if _, err := pw.WriteRows(rows); err != nil {
				return err
			}
			rows = rows[:0]
			b.reset()
		}
	}
	if _, err := pw.WriteRows(rows); err != nil {
		return err
	}
	b.reset()
	return pw.Close()
}

// BenchmarkArchiveWrite is the archive's write path on one goroutine: log
// entries decoded, built into Parquet rows and written (zstd) as one file
// of 100,000 results. Run with -cpu 1 for the one-core figure.
func BenchmarkArchiveWrite(b *testing.B) {
	const n = 100_000
	rows := benchRows(n)
	entries := make([][]byte, n)
	for i := range rows {
		entries[i] = AppendEntry(nil, &rows[i])
	}
	fs, err := newFileSchema(lineTemps)
	if err != nil {
		b.Fatal(err)
	}
	bld := &rowBuilder{fs: fs}
	prs := make([]parquet.Row, 0, writeBatch)
	var r Row
	var size int64
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		cw := &countWriter{}
		if err := writeEntries(cw, fs, entries, prs, bld, &r); err != nil {
			b.Fatal(err)
		}
		size = cw.n
	}
	// The machine is shared: results per second of this process's CPU
	// time is the one-core figure; results/s the wall clock's.
	b.ReportMetric(float64(n)*float64(b.N)/(cpuTime()-cpu0).Seconds(), "results/cpu-s")
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "results/s")
	b.ReportMetric(float64(size)/n, "bytes/result")
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkBytesPerResult compares the archive's Parquet with JSON lines
// of the same results (the hub API's JSON, one object a line), plain and
// zstd-compressed: bytes per result for 100,000 results.
func BenchmarkBytesPerResult(b *testing.B) {
	const n = 100_000
	rows := benchRows(n)
	fs, err := newFileSchema(lineTemps)
	if err != nil {
		b.Fatal(err)
	}
	entries := make([][]byte, n)
	for i := range rows {
		entries[i] = AppendEntry(nil, &rows[i])
	}
	var r Row
	parquetAppend := func() int64 {
		cw := &countWriter{}
		if err := writeEntries(cw, fs, entries, nil, &rowBuilder{fs: fs}, &r); err != nil {
			b.Fatal(err)
		}
		return cw.n
	}
	parquetSorted := func() int64 {
		var buf []sortRow
		bld := &rowBuilder{fs: fs}
		for i := range rows {
			pr, err := bld.build(nil, &rows[i])
			if err != nil {
				b.Fatal(err)
			}
			pr = pr.Clone()
			buf = append(buf, sortRow{key: fs.sortKey(nil, pr), row: pr})
		}
		sortRows(buf)
		path := filepath.Join(b.TempDir(), "sorted.parquet")
		if _, err := writeSorted(path, fs, &sliceSource{rows: buf}); err != nil {
			b.Fatal(err)
		}
		st, _ := os.Stat(path)
		return st.Size()
	}
	jsonLines := func(compress bool) int64 {
		cw := &countWriter{}
		var w io.Writer = cw
		var zw *zstd.Encoder
		if compress {
			zw, _ = zstd.NewWriter(cw)
			w = zw
		}
		bw := bufio.NewWriter(w)
		var line []byte
		var fields []keyField
		for i := range rows {
			r := &rows[i]
			fields, _ = splitKey(fields, r.Key, 1)
			line = append(line[:0], `{"pipeline":"line-temps","key":`...)
			line = appendKeyJSON(line, lineTemps.Keys, fields)
			line = fmt.Appendf(line, `,"window_start":%d,"window_end":%d,"version":%d,"edges":%d,"emitted_ms":%d,"values":{"readings":%d,"avg_temp":%s,"max_temp":%s,"p95_temp":%s,"devices_seen":%d}}`+"\n",
				r.Start, r.End, r.Version, r.Edges, r.Emitted, r.Values[0].Int, r.Values[1], r.Values[2], r.Values[3], r.Values[4].Int)
			bw.Write(line)
		}
		bw.Flush()
		if zw != nil {
			zw.Close()
		}
		return cw.n
	}
	var pa, ps, jl, jz int64
	b.ReportAllocs()
	for b.Loop() {
		pa, ps, jl, jz = parquetAppend(), parquetSorted(), jsonLines(false), jsonLines(true)
	}
	b.ReportMetric(float64(pa)/n, "parquet-B/result")
	b.ReportMetric(float64(ps)/n, "parquet-sorted-B/result")
	b.ReportMetric(float64(jl)/n, "jsonl-B/result")
	b.ReportMetric(float64(jz)/n, "jsonl-zstd-B/result")
}

// BenchmarkCompaction1GB compacts RUNNEL_BENCH_COMPACT_MB megabytes
// (1024 for the README's figure) of small append files of one partition
// in the default 64 MiB sort buffer, and reports its time and the peak
// RSS of the process while it ran (VmHWM, reset before). It does not run
// without the variable: generating the input takes minutes.
func BenchmarkCompaction1GB(b *testing.B) {
	mb, _ := strconv.Atoi(os.Getenv("RUNNEL_BENCH_COMPACT_MB"))
	if mb == 0 {
		b.Skip("set RUNNEL_BENCH_COMPACT_MB (e.g. 1024) to run it")
	}
	dir := b.TempDir()
	st, err := OpenDir(filepath.Join(dir, "store"))
	if err != nil {
		b.Fatal(err)
	}
	fs, err := newFileSchema(lineTemps)
	if err != nil {
		b.Fatal(err)
	}
	// Small files of 100,000 results, the windows of one hour spread over
	// them (late versions land in every file), until mb megabytes.
	rng := rand.New(rand.NewPCG(3, 4))
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC).UnixMilli()
	part := PartitionOf(lineTemps.Pipeline, base).String()
	var inputs []File
	var total, rowsIn int64
	var r Row
	for i := 0; total < int64(mb)<<20; i++ {
		entries := make([][]byte, 100_000)
		for j := range entries {
			dev := "dev-" + strconv.Itoa(rng.IntN(200_000))
			key := append([]byte{'s', byte(len(dev))}, dev...)
			start := base + int64(rng.IntN(60))*60_000
			t := 21 + rng.NormFloat64()*2
			row := Row{Schema: fs.id, Start: start, End: start + 60_000, Version: uint32(1 + rng.IntN(3)), Edges: 2,
				Emitted: base + int64(i)*1000, Key: key, Values: []Value{{Kind: Int, Int: int64(rng.IntN(100))},
					{Kind: Float, Float: t}, {Kind: Float, Float: t + rng.Float64()}, {Kind: Float, Float: t + 1}, {Kind: Int, Int: 1}}}
			entries[j] = AppendEntry(nil, &row)
		}
		path := filepath.Join(dir, "in.parquet")
		f, _ := os.Create(path)
		bw := bufio.NewWriter(f)
		if err := writeEntries(bw, fs, entries, nil, &rowBuilder{fs: fs}, &r); err != nil {
			b.Fatal(err)
		}
		bw.Flush()
		f.Close()
		key := fmt.Sprintf("%s/part-%016x-%020d-0000.parquet", part, 0, i)
		if err := st.PutFile(context.Background(), key, path); err != nil {
			b.Fatal(err)
		}
		fi, _ := os.Stat(path)
		total += fi.Size()
		rowsIn += int64(len(entries))
		inputs = append(inputs, File{Path: key, Rows: int64(len(entries)), Bytes: fi.Size(), Schema: fmt.Sprintf("%016x", fs.id)})
	}
	a := &Archiver{o: Options{Store: st, StagingDir: filepath.Join(dir, "staging"), CompactionMemory: 64 << 20}.withDefaults()}
	os.MkdirAll(a.o.StagingDir, 0o755)
	runtime.GC()
	b.ReportAllocs()
	var peak int64
	for b.Loop() {
		os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM
		out := filepath.Join(a.o.StagingDir, "out.parquet")
		n, err := a.merge(context.Background(), inputs, out)
		if err != nil {
			b.Fatal(err)
		}
		if n != rowsIn {
			b.Fatalf("compacted %d rows of %d", n, rowsIn)
		}
		peak = max(peak, vmHWM())
		os.Remove(out)
	}
	b.ReportMetric(float64(total)/(1<<20), "MiB-in")
	b.ReportMetric(float64(rowsIn), "rows-in")
	b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/compaction")
}

// cpuTime is the process's CPU time, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// vmHWM is the process's peak resident set (bytes), from /proc.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

var (
	_ = bytes.NewReader
	_ = binary.AppendUvarint
)
