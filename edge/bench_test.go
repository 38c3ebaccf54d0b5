package edge_test

import (
	"bufio"
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
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/internal/testbroker"
)

const benchEdgeSpec = `name: bench
source: {mqtt: {topic: "plant/+/temp", qos: 1}}
event_time: {field: ts, unit: ms}
event_id: [device, seq]
key: [device]
watermark: {max_out_of_order: 5s}
window: {tumbling: 1s}
aggregates: {readings: count(), avg_temp: avg(temp), max_temp: max(temp)}
`

// procCPU returns the CPU time (user + system) process pid has used.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// procSwitches returns the context switches of process pid's threads so
// far (those of threads that have exited are not counted): each is a
// thread going to sleep or being preempted, so their count per message
// is the wake-ups that cost an edge its CPU.
func procSwitches(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "voluntary_ctxt_switches:") || strings.HasPrefix(line, "nonvoluntary_ctxt_switches:") {
				v, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
				n += v
			}
		}
	}
	return n
}

// procPeakRSS returns the peak resident set of process pid in bytes.
func procPeakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// edgeBinary builds runnel-edge into dir, or returns RUNNEL_BENCH_EDGE_BIN,
// a binary built elsewhere (another commit's, for runs side by side).
func edgeBinary(b *testing.B, dir string) string {
	if bin := os.Getenv("RUNNEL_BENCH_EDGE_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(dir, "runnel-edge")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/runnel-edge").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// BenchmarkEdgeIngest sends QoS 1 readings of 10^5 devices through a real
// Mosquitto, side by side to a real runnel-edge process (ingest log with
// group commit, decode, 1 s tumbling count/avg/max per device, checkpoints
// every second) and to a bare paho.golang subscriber that does nothing.
// Both are processes of their own, measured alike: the message rate (their
// ratio is the figure), CPU time per 100k messages and peak RSS. Run the
// two one after the other (-count runs each sub-benchmark count times in a
// row), so compare runs made close together.
func BenchmarkEdgeIngest(b *testing.B) {
	for _, devices := range []int{10, 100_000} {
		b.Run(fmt.Sprintf("devices=%d", devices), func(b *testing.B) { benchEdgeIngest(b, devices) })
	}
}

func benchEdgeIngest(b *testing.B, devices int) {
	payloads := make([][]byte, 0, 1<<16)
	rng := rand.New(rand.NewPCG(5, 5))
	for range cap(payloads) {
		payloads = append(payloads, nil)
	}
	mk := func(i int) []byte {
		return fmt.Appendf(payloads[i%len(payloads)][:0], `{"device":"sensor-%06d","seq":%d,"ts":%d,"temp":%.2f}`,
			rng.IntN(devices), i, 1_767_225_600_000+int64(i/20), 15+rng.Float64()*20)
	}
	// stream publishes 1000 readings per iteration through the broker at
	// hostPort, calls received to wait until the receiver has them all, and
	// reports the receiver process's rate, CPU time and peak RSS.
	stream := func(b *testing.B, hostPort string, pid int, received func(sent int)) {
		pub := testbroker.NewPublisher(b, hostPort)
		cpu0, sw0 := procCPU(pid), procSwitches(pid)
		sent := 0
		began := time.Now()
		for b.Loop() {
			for range 1000 {
				if err := pub.PublishAsync(context.Background(), "plant/north/temp", mk(sent), 1); err != nil {
					b.Fatal(err)
				}
				sent++
			}
		}
		received(sent)
		elapsed := time.Since(began)
		cpu := procCPU(pid) - cpu0
		b.ReportMetric(float64(sent)/elapsed.Seconds(), "msgs/s")
		b.ReportMetric(cpu.Seconds()*100_000/float64(sent), "cpu-s/100k")
		b.ReportMetric(float64(procSwitches(pid)-sw0)*100_000/float64(sent), "switches/100k")
		b.ReportMetric(float64(procPeakRSS(pid))/(1<<20), "peak-rss-MiB")
	}
	b.Run("receiver=runnel-edge", func(b *testing.B) {
		dir := b.TempDir()
		bin := edgeBinary(b, dir)
		spec := filepath.Join(dir, "bench.yaml")
		os.WriteFile(spec, []byte(benchEdgeSpec), 0o644)
		m := testbroker.Start(b)
		cmd := exec.Command(bin, "--pipeline", spec, "--data-dir", filepath.Join(dir, "data"), "--broker-url", m.Addr(),
			"--edge-id", "bench", "--http-addr", "127.0.0.1:19481", "--log-level", "error")
		cmd.Stderr = os.Stderr
		// RUNNEL_BENCH_EDGE_ARGS adds flags, to measure other settings.
		if v := os.Getenv("RUNNEL_BENCH_EDGE_ARGS"); v != "" {
			cmd.Args = append(cmd.Args, strings.Fields(v)...)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
		in := func() int64 {
			v := metricValue("127.0.0.1:19481", "runnel_edge_records_in_total")
			n, _ := strconv.ParseFloat(v, 64)
			return int64(n)
		}
		deadline := time.Now().Add(10 * time.Second)
		for metricValue("127.0.0.1:19481", "runnel_edge_mqtt_connected") != "1" {
			if time.Now().After(deadline) {
				b.Fatal("edge did not connect")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// RUNNEL_BENCH_PROFILE=FILE writes a 6 s CPU profile of the edge,
		// from 1 s into the stream, to FILE.devices=N (-benchtime 400x or
		// more lasts long enough).
		if f := os.Getenv("RUNNEL_BENCH_PROFILE"); f != "" {
			go func() {
				time.Sleep(time.Second)
				resp, err := http.Get("http://127.0.0.1:19481/debug/pprof/profile?seconds=6")
				if err != nil {
					return
				}
				defer resp.Body.Close()
				data, _ := io.ReadAll(resp.Body)
				os.WriteFile(fmt.Sprintf("%s.devices=%d", f, devices), data, 0o644)
			}()
		}
		fsyncs := func() float64 {
			v, _ := strconv.ParseFloat(metricValue("127.0.0.1:19481", "runnel_edge_ingest_log_fsyncs_total"), 64)
			return v
		}
		fsyncs0, total := fsyncs(), 0
		stream(b, m.HostPort(), cmd.Process.Pid, func(sent int) {
			// Scrapes cost the edge CPU too: only after the stream, every
			// 20 ms (a coarser poll would add its overshoot to its time).
			for in() < int64(sent) {
				time.Sleep(20 * time.Millisecond)
			}
			total = sent
		})
		// The group commits: each is a wake-up of the committer, the
		// pump and the workers, and an fsync.
		b.ReportMetric((fsyncs()-fsyncs0)*100_000/float64(total), "commits/100k")
	})
	b.Run("receiver=bare-paho", func(b *testing.B) {
		m := testbroker.Start(b)
		// The subscriber is a process of its own, like the edge, so that its
		// CPU time is measured the same way: this test binary re-executed.
		cmd := exec.Command(os.Args[0], "-test.run", "^$")
		cmd.Env = append(os.Environ(), bareSubscriberEnv+"="+m.HostPort())
		cmd.Stderr = os.Stderr
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer cmd.Wait()
		defer cmd.Process.Kill()
		out := bufio.NewScanner(stdout)
		if !out.Scan() || out.Text() != "subscribed" {
			b.Fatalf("bare subscriber: %q", out.Text())
		}
		stream(b, m.HostPort(), cmd.Process.Pid, func(sent int) {
			fmt.Fprintln(stdin, sent)
			if !out.Scan() || out.Text() != "done" {
				b.Fatalf("bare subscriber: %q", out.Text())
			}
		})
	})
}

// bareSubscriberEnv, when set to a broker's host:port, turns the test
// binary into BenchmarkEdgeIngest's bare subscriber: a paho.golang client
// that subscribes to plant/# with QoS 1 (asking for the edge's default
// Receive Maximum), says "subscribed", acks every message and does nothing
// else. It then reads the number of messages sent from stdin and, once it
// has received that many, says "done" and waits to be killed, so that the
// benchmark can read its CPU time and peak RSS.
const bareSubscriberEnv = "RUNNEL_BENCH_BARE_SUBSCRIBER"

func runBareSubscriber(hostPort string) {
	var got atomic.Int64
	rm := uint16(mqtt.DefaultReceiveMaximum)
	ctx := context.Background()
	cli, err := testbroker.Dial(ctx, hostPort, paho.ClientConfig{ClientID: "bench-bare",
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) {
			got.Add(1)
			return true, nil
		}}}, &paho.Connect{ClientID: "bench-bare", CleanStart: true, KeepAlive: 30, Properties: &paho.ConnectProperties{ReceiveMaximum: &rm}})
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	if _, err := cli.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "plant/#", QoS: 1}}}); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("subscribed")
	var want int64
	if _, err := fmt.Scan(&want); err != nil {
		os.Exit(1)
	}
	for got.Load() < want {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("done")
	select {}
}
