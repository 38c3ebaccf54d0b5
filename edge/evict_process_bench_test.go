package edge_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/ingestlog"
)

// BenchmarkEvictMemory measures a runnel-edge process's peak RSS with 10^6
// keys of window state, with state.max_resident_keys 50,000 (evict=on),
// derived from memory_limit (evict=memory-limit: 65,536) and without
// (evict=off, a bound above the keys): the process recovers a data directory whose ingest
// log holds 2·10^6 readings of 10^6 devices, each reporting every 10 min
// of event time in a random order, under a 10 s tumbling count/avg/max
// with 10 min of allowed lateness (so every device's last window stays for
// 10 min: 10^6 keys of state), checkpoints every second, memory_limit
// 48MiB (RUNNEL_BENCH_EDGE_ARGS adds flags). The figures: peak-rss-MiB
// (VmHWM), the replay's CPU time per record, and the resident keys,
// evictions and reloads when it has caught up; then the same for a restart
// on the data directory it left (restart-*).
func BenchmarkEvictMemory(b *testing.B) {
	const devices, records = 1_000_000, 2_000_000
	bin := filepath.Join(b.TempDir(), "runnel-edge")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/runnel-edge").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name     string
		resident int
	}{{"keys=1e6/evict=off", 1 << 30}, {"keys=1e6/evict=on", 50_000}, {"keys=1e6/evict=memory-limit", 0}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				dir := b.TempDir()
				data := filepath.Join(dir, "data")
				writeDevicesLog(b, filepath.Join(data, "log"), devices, records)
				spec := filepath.Join(dir, "evict.yaml")
				if err := os.WriteFile(spec, []byte(evictBenchSpec), 0o644); err != nil {
					b.Fatal(err)
				}
				httpAddr, brokerAddr := freeLoopback(b), freeLoopback(b)
				cmd := exec.Command(bin, "--pipeline", spec, "--data-dir", data, "--edge-id", "evict",
					"--http-addr", httpAddr, "--embedded-broker-addr", brokerAddr, "--log-level", "error",
					"--memory-limit", "48MiB", "--state-max-resident-keys", strconv.Itoa(c.resident))
				if v := os.Getenv("RUNNEL_BENCH_EDGE_ARGS"); v != "" {
					cmd.Args = append(cmd.Args, strings.Fields(v)...)
				}
				cmd.Stderr = os.Stderr
				b.StartTimer()
				began := time.Now()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				num := func(name string) float64 {
					v, _ := strconv.ParseFloat(metricLine(httpAddr, name), 64)
					return v
				}
				var peakAnon, peakFile int64
				var peakResident float64
				for num("runnel_edge_records_in_total") < records {
					anon, file := procRSS(cmd.Process.Pid)
					peakAnon, peakFile = max(peakAnon, anon), max(peakFile, file)
					peakResident = max(peakResident, num("runnel_edge_window_resident_keys"))
					if time.Since(began) > 10*time.Minute {
						b.Fatal("the edge did not catch up in 10 minutes")
					}
					time.Sleep(100 * time.Millisecond)
				}
				elapsed := time.Since(began)
				if out := os.Getenv("RUNNEL_BENCH_HEAP_PROFILE"); out != "" {
					// The live heap at the end (a collection first), for go tool pprof.
					if resp, err := http.Get("http://" + httpAddr + "/debug/pprof/heap?gc=1"); err == nil {
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						os.WriteFile(out, body, 0o644)
					}
				}
				cpu := procCPU(cmd.Process.Pid)
				b.StopTimer()
				b.ReportMetric(float64(procPeakRSS(cmd.Process.Pid))/(1<<20), "peak-rss-MiB")
				b.ReportMetric(float64(cpu.Nanoseconds())/records, "cpu-ns/record")
				b.ReportMetric(records/elapsed.Seconds(), "records/s")
				b.ReportMetric(num("runnel_edge_window_resident_keys"), "resident-keys")
				b.ReportMetric(peakResident, "peak-resident-keys")
				b.ReportMetric(num("runnel_edge_window_evictions_total"), "evictions")
				b.ReportMetric(num("runnel_edge_window_reloads_total"), "reloads")
				b.ReportMetric(float64(peakAnon)/(1<<20), "peak-anon-MiB")
				b.ReportMetric(float64(peakFile)/(1<<20), "peak-file-MiB")
				b.ReportMetric(num("go_memstats_heap_inuse_bytes")/(1<<20), "heap-inuse-MiB")
				cmd.Process.Signal(os.Interrupt)
				cmd.Wait()
				restart(b, cmd.Args, httpAddr)
				b.StartTimer()
			}
		})
	}
}

// restart starts the edge again on the data directory it stopped with
// (a checkpoint of 10^6 keys, the log all covered) and reports the
// restart's peak RSS, the time until it serves /metrics (the state is
// restored by then) and the keys it holds then.
func restart(b *testing.B, args []string, httpAddr string) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	var resident string
	var peakAnon, peakFile int64
	for resident == "" {
		if time.Since(began) > 5*time.Minute {
			b.Fatal("the restarted edge did not serve /metrics in 5 minutes")
		}
		time.Sleep(20 * time.Millisecond)
		anon, file := procRSS(cmd.Process.Pid)
		peakAnon, peakFile = max(peakAnon, anon), max(peakFile, file)
		resident = metricLine(httpAddr, "runnel_edge_window_resident_keys")
	}
	b.ReportMetric(time.Since(began).Seconds(), "restart-s")
	b.ReportMetric(float64(procPeakRSS(cmd.Process.Pid))/(1<<20), "restart-peak-rss-MiB")
	b.ReportMetric(float64(peakAnon)/(1<<20), "restart-peak-anon-MiB")
	b.ReportMetric(float64(peakFile)/(1<<20), "restart-peak-file-MiB")
	n, _ := strconv.ParseFloat(resident, 64)
	b.ReportMetric(n, "restart-resident-keys")
}

const evictBenchSpec = `name: evict
source: {mqtt: {topic: "plant/+/temp", qos: 1}}
event_time: {field: ts, unit: ms}
key: [device]
watermark: {max_out_of_order: 5s}
window: {tumbling: 10s}
allowed_lateness: 10m
aggregates: {readings: count(), avg_temp: avg(temp), max_temp: max(temp)}
`

// writeDevicesLog writes an ingest log of records readings: devices
// devices in a random order, each every devices × 0.6 ms of event time,
// up to 2 s out of order.
func writeDevicesLog(b *testing.B, path string, devices, records int) {
	ctx := context.Background()
	l, _, err := ingestlog.Open(ctx, path, &ingestlog.Options{Sync: ingestlog.SyncNever})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	perm := rng.Perm(devices)
	var rec, payload []byte
	for i := range records {
		ts := 1_767_225_600_000 + int64(i)*6/10 - rng.Int64N(2000)
		payload = fmt.Appendf(payload[:0], `{"device":"sensor-%07d","ts":%d,"temp":%d.5}`, perm[i%devices], ts, i%40)
		rec = edge.EncodeRecord(rec[:0], "plant/north/temp", payload)
		if _, err := l.Append(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// freeLoopback is freeAddr for benchmarks.
func freeLoopback(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// procRSS returns the anonymous and file-backed resident bytes of process
// pid (RssAnon, RssFile: the state file's mapped pages are the latter).
func procRSS(pid int) (anon, file int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "RssAnon:":
			anon = kb << 10
		case "RssFile:", "RssShmem:":
			file += kb << 10
		}
	}
	return anon, file
}

// metricLine reads a metric with or without labels from a node's /metrics
// ("" when absent).
func metricLine(addr, name string) string {
	if v := metricValue(addr, name); v != "" {
		return v
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}
