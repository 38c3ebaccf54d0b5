package edge_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runnel-io/runnel/internal/testbroker"
)

// procIO is a process's /proc/<pid>/io: WriteBytes is what it sent to the
// block layer (pages it dirtied, counted once per page until written
// back), WChar every byte it passed to write(2) and friends, sockets and
// pipes included; CancelledBytes is dirtied page cache that a truncate or
// delete dropped before it reached the disk.
type procIO struct{ WriteBytes, WChar, CancelledBytes int64 }

func readProcIO(tb testing.TB, pid int) procIO {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		tb.Fatalf("read /proc/%d/io: %v", pid, err)
	}
	var io procIO
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "write_bytes":
			io.WriteBytes = n
		case "wchar":
			io.WChar = n
		case "cancelled_write_bytes":
			io.CancelledBytes = n
		}
	}
	return io
}

func (a procIO) sub(b procIO) procIO {
	return procIO{a.WriteBytes - b.WriteBytes, a.WChar - b.WChar, a.CancelledBytes - b.CancelledBytes}
}

// deviceWritten is what the block device holding path has written, from
// /sys/dev/block/<major>:<minor>/stat: the filesystem's journal and
// metadata included, which /proc/<pid>/io leaves out, and every other
// process's writes too (so it is a figure of a quiet machine).
func deviceWritten(tb testing.TB, path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		tb.Fatalf("stat %s: %v", path, err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/stat", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		tb.Fatalf("the device of %s: %v", path, err)
	}
	f := strings.Fields(string(b))
	sectors, _ := strconv.ParseInt(f[6], 10, 64) // sectors written, of 512 bytes
	return sectors * 512
}

// wearEdge is a runnel-edge process of BenchmarkEdgeWear.
type wearEdge struct {
	cmd  *exec.Cmd
	addr string // its HTTP address
	data string
}

func startWearEdge(b *testing.B, brokerAddr, httpAddr string, args ...string) *wearEdge {
	dir := b.TempDir()
	bin := edgeBinary(b, dir)
	spec := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(spec, []byte(benchEdgeSpec), 0o644); err != nil {
		b.Fatal(err)
	}
	e := &wearEdge{addr: httpAddr, data: filepath.Join(dir, "data")}
	e.cmd = exec.Command(bin, append([]string{"--pipeline", spec, "--data-dir", e.data, "--broker-url", brokerAddr,
		"--edge-id", "bench", "--http-addr", httpAddr, "--log-level", "error"}, args...)...)
	e.cmd.Stderr = os.Stderr
	if v := os.Getenv("RUNNEL_BENCH_EDGE_ARGS"); v != "" {
		e.cmd.Args = append(e.cmd.Args, strings.Fields(v)...)
	}
	if err := e.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.cmd.Process.Signal(os.Interrupt); e.cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for metricValue(httpAddr, "runnel_edge_mqtt_connected") != "1" {
		if time.Now().After(deadline) {
			b.Fatal("edge did not connect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e
}

// wearMetrics scrapes the edge's counters of what it wrote, by name (and
// part label).
func (e *wearEdge) wearMetrics(b *testing.B) map[string]float64 {
	resp, err := http.Get("http://" + e.addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if _, part, ok := strings.Cut(rest, `part="`); ok {
			name += "/" + part[:strings.IndexByte(part, '"')]
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		m[name] = v
	}
	return m
}

func (e *wearEdge) metric(name string) int64 {
	v, _ := strconv.ParseFloat(metricValue(e.addr, name), 64)
	return int64(v)
}

// waitMetric polls every 20 ms until ok holds for the metric, or fails
// the benchmark after a minute.
func (e *wearEdge) waitMetric(b *testing.B, name string, ok func(int64) bool) {
	deadline := time.Now().Add(time.Minute)
	for !ok(e.metric(name)) {
		if time.Now().After(deadline) {
			b.Fatalf("%s stays at %d", name, e.metric(name))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkEdgeWear measures what a real runnel-edge process writes to
// disk per payload byte it takes in: the workload of BenchmarkEdgeIngest
// (QoS 1 readings through a real Mosquitto, 1 s tumbling windows,
// checkpoints every second) with 10^5 devices and with 10, and the bytes
// an idle edge writes per minute. The figures come from /proc/<pid>/io,
// read before the first message and after the last one is checkpointed:
// disk-B/B is write_bytes (what reaches the block layer, filesystem
// journal not included) per payload byte, wchar-B/B every byte the
// process wrote (sockets too: MQTT acks and metric scrapes) per payload
// byte. BenchmarkWearBreakdown says which file the bytes go to.
//
// The idle case publishes a few readings, waits until checkpoint ticks
// are skipped (nothing left to commit), then counts write_bytes over 20 s
// with checkpoints every 100 ms (200 ticks); it must be 0. It reports the
// CPU time and context switches of those 20 s too.
func BenchmarkEdgeWear(b *testing.B) {
	for _, devices := range []int{100_000, 10} {
		b.Run(fmt.Sprintf("devices=%d", devices), func(b *testing.B) {
			m := testbroker.Start(b)
			e := startWearEdge(b, m.Addr(), "127.0.0.1:19485")
			pub := testbroker.NewPublisher(b, m.HostPort())
			rng := rand.New(rand.NewPCG(5, 5))
			var payload []byte
			m0 := e.wearMetrics(b)
			io0 := readProcIO(b, e.cmd.Process.Pid)
			dev0 := deviceWritten(b, e.data)
			sent, payloadBytes := 0, 0
			for b.Loop() {
				for range 1000 {
					payload = fmt.Appendf(payload[:0], `{"device":"sensor-%06d","seq":%d,"ts":%d,"temp":%.2f}`,
						rng.IntN(devices), sent, 1_767_225_600_000+int64(sent/20), 15+rng.Float64()*20)
					if err := pub.PublishAsync(context.Background(), "plant/north/temp", payload, 1); err != nil {
						b.Fatal(err)
					}
					sent++
					payloadBytes += len(payload)
				}
			}
			e.waitMetric(b, "runnel_edge_records_in_total", func(v int64) bool { return v >= int64(sent) })
			// Two skipped ticks: the last barrier covered everything, and
			// its checkpoint has committed.
			sk := e.metric("runnel_edge_checkpoints_skipped_total")
			e.waitMetric(b, "runnel_edge_checkpoints_skipped_total", func(v int64) bool { return v >= sk+2 })
			d := readProcIO(b, e.cmd.Process.Pid).sub(io0)
			m1 := e.wearMetrics(b)
			per := func(v float64, unit string) { b.ReportMetric(v/float64(payloadBytes), unit) }
			delta := func(name string) float64 { return m1[name] - m0[name] }
			per(float64(d.WriteBytes), "disk-B/B")
			per(float64(deviceWritten(b, e.data)-dev0), "device-B/B")
			per(float64(d.WChar), "wchar-B/B")
			per(float64(d.CancelledBytes), "cancelled-B/B")
			// The breakdown, from the edge's own counters (wear.go).
			per(delta("runnel_edge_ingest_log_written_bytes_total"), "log-B/B")
			per(delta("runnel_edge_ingest_log_disk_bytes_total"), "log-pages-B/B")
			per(delta("runnel_edge_state_written_bytes_total"), "bbolt-B/B")
			per(delta("runnel_edge_state_freelist_written_bytes_total"), "freelist-B/B")
			per(delta("runnel_edge_checkpoint_stored_bytes_total/state"), "ops-B/B")
			per(delta("runnel_edge_checkpoint_stored_bytes_total/compaction"), "compaction-B/B")
			per(delta("runnel_edge_checkpoint_stored_bytes_total/outbox"), "outbox-B/B")
			per(delta("runnel_edge_checkpoint_stored_bytes_total/side"), "side-B/B")
			b.ReportMetric(delta("runnel_edge_checkpoints_total"), "checkpoints")
			b.ReportMetric(delta("runnel_edge_ingest_log_fsyncs_total")*1000/float64(sent), "log-fsyncs/1k")
			b.ReportMetric(float64(payloadBytes)/float64(sent), "payload-B/msg")
		})
	}
	// slow: a gateway's usual load, 20 readings a second from 10 devices
	// for 10 s, checkpoints every second: what each checkpoint writes. The
	// edge has taken 20,000 readings first, so that its event-id dedup
	// window (16,384 ids) is full, as it is after 14 minutes at that rate.
	b.Run("slow", func(b *testing.B) {
		m := testbroker.Start(b)
		e := startWearEdge(b, m.Addr(), "127.0.0.1:19487")
		pub := testbroker.NewPublisher(b, m.HostPort())
		var d procIO
		var m0, m1 map[string]float64
		sent, payloadBytes := 0, 0
		for ; sent < 20_000; sent++ {
			p := fmt.Appendf(nil, `{"device":"sensor-%06d","seq":%d,"ts":%d,"temp":20.5}`, sent%10, sent, 1_767_225_600_000+int64(sent))
			if err := pub.PublishAsync(context.Background(), "plant/north/temp", p, 1); err != nil {
				b.Fatal(err)
			}
		}
		e.waitMetric(b, "runnel_edge_records_in_total", func(v int64) bool { return v >= int64(sent) })
		sk := e.metric("runnel_edge_checkpoints_skipped_total")
		e.waitMetric(b, "runnel_edge_checkpoints_skipped_total", func(v int64) bool { return v >= sk+2 })
		for b.Loop() {
			m0 = e.wearMetrics(b)
			io0 := readProcIO(b, e.cmd.Process.Pid)
			tick := time.NewTicker(50 * time.Millisecond)
			for range 200 {
				<-tick.C
				p := fmt.Appendf(nil, `{"device":"sensor-%06d","seq":%d,"ts":%d,"temp":20.5}`, sent%10, sent, 1_767_225_600_000+int64(sent))
				pub.MustPublish("plant/north/temp", p, 1)
				sent++
				payloadBytes += len(p)
			}
			tick.Stop()
			e.waitMetric(b, "runnel_edge_records_in_total", func(v int64) bool { return v >= int64(sent) })
			sk = e.metric("runnel_edge_checkpoints_skipped_total")
			e.waitMetric(b, "runnel_edge_checkpoints_skipped_total", func(v int64) bool { return v >= sk+2 })
			d = readProcIO(b, e.cmd.Process.Pid).sub(io0)
			m1 = e.wearMetrics(b)
		}
		ck := m1["runnel_edge_checkpoints_total"] - m0["runnel_edge_checkpoints_total"]
		b.ReportMetric(float64(d.WriteBytes)/float64(payloadBytes), "disk-B/B")
		b.ReportMetric((m1["runnel_edge_state_written_bytes_total"]-m0["runnel_edge_state_written_bytes_total"])/ck, "bbolt-B/checkpoint")
		b.ReportMetric(float64(d.WriteBytes)/ck, "disk-B/checkpoint")
		b.ReportMetric(ck, "checkpoints")
		for _, part := range []string{"state", "compaction", "outbox", "side"} {
			name := "runnel_edge_checkpoint_stored_bytes_total/" + part
			b.ReportMetric((m1[name]-m0[name])/ck, part+"-B/checkpoint")
		}
		b.ReportMetric((m1["runnel_edge_ingest_log_disk_bytes_total"]-m0["runnel_edge_ingest_log_disk_bytes_total"])/ck, "log-pages-B/checkpoint")
	})
	b.Run("idle", func(b *testing.B) {
		m := testbroker.Start(b)
		e := startWearEdge(b, m.Addr(), "127.0.0.1:19486", "--checkpoint-interval", "100ms")
		pub := testbroker.NewPublisher(b, m.HostPort())
		for i := range 10 {
			pub.MustPublish("plant/north/temp", fmt.Appendf(nil, `{"device":"sensor-%06d","seq":%d,"ts":%d,"temp":20}`,
				i, i, 1_767_225_600_000+int64(i)), 1)
		}
		e.waitMetric(b, "runnel_edge_records_in_total", func(v int64) bool { return v >= 10 })
		sk := e.metric("runnel_edge_checkpoints_skipped_total")
		e.waitMetric(b, "runnel_edge_checkpoints_skipped_total", func(v int64) bool { return v >= sk+5 })
		const span = 20 * time.Second
		var d procIO
		var ck0, ck1, switches int64
		var cpu time.Duration
		pid := e.cmd.Process.Pid
		for b.Loop() {
			ck0 = e.metric("runnel_edge_checkpoints_total")
			io0, cpu0, sw0 := readProcIO(b, pid), procCPU(pid), procSwitches(pid)
			time.Sleep(span) // no scrape meanwhile: it would count in wchar
			d = readProcIO(b, pid).sub(io0)
			cpu, switches = procCPU(pid)-cpu0, procSwitches(pid)-sw0
			ck1 = e.metric("runnel_edge_checkpoints_total")
		}
		perMin := float64(time.Minute) / float64(span)
		b.ReportMetric(float64(d.WriteBytes)*perMin, "disk-B/min")
		b.ReportMetric(float64(d.WChar)*perMin, "wchar-B/min")
		// What idling costs the gateway's CPU: the checkpoint ticks
		// (here ten a second), the MQTT keep-alive, the runtime.
		b.ReportMetric(float64(cpu.Milliseconds())*perMin, "cpu-ms/min")
		b.ReportMetric(float64(switches)*perMin, "switches/min")
		b.ReportMetric(float64(ck1-ck0), "checkpoints")
		if d.WriteBytes != 0 {
			b.Errorf("an idle edge wrote %d bytes to disk in %v (%d checkpoints)", d.WriteBytes, span, ck1-ck0)
		}
	})
}
