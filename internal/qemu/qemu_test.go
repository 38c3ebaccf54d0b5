package qemu_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/goleak"

	"github.com/runnel-io/runnel/internal/qemu"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEdgeUnderQemu runs the real runnel-edge, cross-built for arm64 and
// armv7 as `make release` builds it, under qemu-user:
//
//   - --version names the stamped version and the target platform;
//   - replay of examples/ gives the golden results (floats within a
//     relative 1e-9: arm64 fuses multiply-adds), late records and dead
//     letters;
//   - a live run on the embedded broker: readings published with paho
//     from the host, the node killed with SIGKILL once it has read the
//     first half, restarted, the second half published with repeats of
//     readings of the first; the results it publishes on the broker, and
//     its file output after a clean stop, count every reading exactly
//     once; /healthz names the version.
//
// The readings are published at QoS 1, each waiting for its PUBACK,
// which the embedded broker sends once the reading is in the ingest log
// and durable (the edge's intake, edge/broker): a SIGKILL loses none that
// was acknowledged.
func TestEdgeUnderQemu(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-builds runnel-edge and runs it under qemu")
	}
	for _, a := range qemu.Arches {
		t.Run(a.Name, func(t *testing.T) {
			emu := a.Need(t)
			bin := qemu.Build(t, a, t.TempDir(), "../../cmd/runnel-edge")
			t.Run("version", func(t *testing.T) { testVersion(t, a, emu, bin) })
			t.Run("replay", func(t *testing.T) { testReplay(t, emu, bin) })
			t.Run("live", func(t *testing.T) { testLive(t, a, emu, bin) })
		})
	}
}

func testVersion(t *testing.T, a qemu.Arch, emu, bin string) {
	out, err := qemu.Command(emu, bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	platform := "linux/" + a.GOARCH
	if a.GOARM != "" {
		platform += " (GOARM=" + a.GOARM + ")"
	}
	for _, want := range []string{"runnel-edge " + qemu.Version + "\n", "commit:   qemu\n", "platform: " + platform + "\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--version lacks %q:\n%s", want, out)
		}
	}
}

// testReplay: the emulated replay of examples/ against edge/testdata's
// golden files.
func testReplay(t *testing.T, emu, bin string) {
	dir := t.TempDir()
	late, dead := filepath.Join(dir, "late.jsonl"), filepath.Join(dir, "dead.jsonl")
	cmd := qemu.Command(emu, bin, "replay", "--pipeline", "../../examples/line-temps.yaml",
		"--input", "../../examples/line-temps.jsonl", "--late", late, "--dead-letter", dead)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr.String())
	}
	golden := func(name string) []byte {
		b, err := os.ReadFile("../../edge/testdata/line-temps." + name + ".golden")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if err := sameResults(stdout.Bytes(), golden("results"), 1e-9); err != nil {
		t.Errorf("results differ from the golden file: %v", err)
	}
	for _, f := range []struct{ name, path string }{{"late", late}, {"dead", dead}} {
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := sortedLines(got), sortedLines(golden(f.name)); g != w {
			t.Errorf("%s records differ from the golden file:\n%s\nwant\n%s", f.name, g, w)
		}
	}
}

// sameResults compares two sets of result lines (JSON, any order): the
// same results, each with the same values, numbers within a relative tol.
func sameResults(got, want []byte, tol float64) error {
	g, err := byIdentity(got)
	if err != nil {
		return fmt.Errorf("got: %w", err)
	}
	w, err := byIdentity(want)
	if err != nil {
		return fmt.Errorf("want: %w", err)
	}
	var problems []string
	for id, wv := range w {
		gv, ok := g[id]
		if !ok {
			problems = append(problems, "missing "+id)
			continue
		}
		for name, x := range wv {
			if y, ok := gv[name]; !ok || !closeTo(y, x, tol) {
				problems = append(problems, fmt.Sprintf("%s: %s = %v, want %v", id, name, gv[name], x))
			}
		}
		if len(gv) != len(wv) {
			problems = append(problems, fmt.Sprintf("%s: values %v, want %v", id, gv, wv))
		}
	}
	for id := range g {
		if _, ok := w[id]; !ok {
			problems = append(problems, "unexpected "+id)
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("%d problems:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	return nil
}

// byIdentity maps each result line's pipeline, key, window and version
// to its values.
func byIdentity(b []byte) (map[string]map[string]float64, error) {
	out := map[string]map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r struct {
			Pipeline    string             `json:"pipeline"`
			Key         map[string]any     `json:"key"`
			WindowStart int64              `json:"window_start"`
			WindowEnd   int64              `json:"window_end"`
			Version     int                `json:"version"`
			Values      map[string]float64 `json:"values"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		id := fmt.Sprintf("%s %v [%d,%d) v%d", r.Pipeline, r.Key, r.WindowStart, r.WindowEnd, r.Version)
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("result %s twice", id)
		}
		out[id] = r.Values
	}
	return out, nil
}

func closeTo(x, y, tol float64) bool {
	return x == y || math.Abs(x-y) <= tol*math.Max(math.Abs(x), math.Abs(y))
}

func sortedLines(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

const liveSpec = `name: qemu
source: {mqtt: {topic: "plant/+/temp", qos: 1}}
event_time: {field: ts, unit: ms}
event_id: [device, seq]
key: [device]
# No window closes before the last reading, far ahead, moves the
# watermark: every window's state must survive the SIGKILL.
watermark: {max_out_of_order: 1h}
window: {tumbling: 1s}
allowed_lateness: 1m
aggregates: {n: count(), sum: sum(v), avg: avg(t)}
outputs: [{mqtt: {topic: results/qemu, qos: 1}}, {file: {path: %s}}]
`

type reading struct {
	dev, seq int
	ts, v    int64
	t        float64
}

func (r reading) payload() []byte {
	return fmt.Appendf(nil, `{"device":"d%d","seq":%d,"ts":%d,"v":%d,"t":%.3f}`, r.dev, r.seq, r.ts, r.v, r.t)
}

// window is what a window result says: count, sum and average.
type window struct {
	n, sum int64
	avg    float64
}

// testLive: a live run on the embedded broker, killed and restarted.
func testLive(t *testing.T, a qemu.Arch, emu, bin string) {
	dir := t.TempDir()
	specPath := filepath.Join(dir, "qemu.yaml")
	outFile := filepath.Join(dir, "results.jsonl")
	if err := os.WriteFile(specPath, fmt.Appendf(nil, liveSpec, outFile), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	brokerAddr, httpAddr := freeAddr(t), freeAddr(t)
	p := &testproc.Proc{Name: "runnel-edge " + a.Name}
	p.Args = []string{emu, bin, "run", "--pipeline", specPath, "--data-dir", data, "--edge-id", "qemu-" + a.Name,
		"--embedded-broker-addr", brokerAddr, "--http-addr", httpAddr, "--checkpoint-interval", "200ms"}
	start := func() {
		p.Start(t)
		p.WaitLog(t, "edge: ready")
	}
	defer func() {
		if p.Cmd != nil && p.Cmd.ProcessState == nil {
			if t.Failed() { // a hang: the goroutines' stacks go to the log
				p.Cmd.Process.Signal(syscall.SIGQUIT)
				done := make(chan struct{})
				go func() { p.Cmd.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
				}
			}
			p.Kill()
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", p.Name, p.Logs.String())
		}
	}()

	const devices, perDevice = 5, 200
	base := int64(1_767_225_600_000)
	var first, second []reading
	for i := range 2 * devices * perDevice {
		r := reading{dev: i % devices, seq: i / devices, ts: base + int64(i)*7, v: int64(i % 97), t: 20 + float64(i%13)/8}
		if i < devices*perDevice {
			first = append(first, r)
		} else {
			second = append(second, r)
		}
	}
	want := map[string]window{}
	for _, r := range append(append([]reading(nil), first...), second...) {
		k := fmt.Sprintf("d%d/%d", r.dev, (r.ts/1000)*1000)
		w := want[k]
		w.n++
		w.sum += r.v
		w.avg += (r.t - w.avg) / float64(w.n)
		want[k] = w
	}

	// Run 1: the first half, read into the pipeline (so durable in the
	// ingest log, some of it checkpointed), then SIGKILL.
	start()
	var hz struct{ Status, Version string }
	getJSON(t, "http://"+httpAddr+"/healthz", &hz)
	if hz.Version != qemu.Version {
		t.Errorf("/healthz version %q, want %q", hz.Version, qemu.Version)
	}
	pub := testbroker.NewPublisher(t, brokerAddr)
	for _, r := range first {
		pub.MustPublish("plant/north/temp", r.payload(), 1)
	}
	waitMetric(t, httpAddr, "runnel_edge_records_in_total", float64(len(first)))
	checkpoints := metric(httpAddr, "runnel_edge_checkpoints_total")
	pub.Close()
	p.Kill()
	t.Logf("%s: killed with SIGKILL after %d readings read, %v checkpoints", a.Name, len(first), checkpoints)

	// Run 2: the second half, with the first 50 readings again (as a
	// device would resend what it is not sure of), and one reading far
	// ahead that closes every window.
	start()
	results := subscribe(t, brokerAddr, "results/qemu")
	cpu0 := cpuTime(t, p.Cmd.Process.Pid)
	pub = testbroker.NewPublisher(t, brokerAddr)
	sent := 0
	for i, r := range second {
		pub.MustPublish("plant/south/temp", r.payload(), 1)
		if i%20 == 0 && i/20 < 50 {
			pub.MustPublish("plant/north/temp", first[i/20].payload(), 1)
			sent++
		}
		sent++
	}
	pub.MustPublish("plant/north/temp", reading{dev: 99, ts: base + 7_200_000}.payload(), 1)
	sent++
	pub.Close()

	// Live: the results the node publishes on its broker.
	deadline := time.Now().Add(60 * time.Second)
	for len(results.latest()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cpu := cpuTime(t, p.Cmd.Process.Pid) - cpu0
	if len(results.latest()) < len(want) {
		t.Logf("after 60 s: %d of %d windows published; metrics: records_in %v, duplicates %v, results %v", len(results.latest()), len(want),
			metric(httpAddr, "runnel_edge_records_in_total"), metric(httpAddr, "runnel_edge_duplicates_total"), metric(httpAddr, "runnel_edge_results_total"))
	}
	t.Logf("%s: live run: %d messages after the restart, %.1f CPU-ms per message (embedded broker and edge, emulated; %v CPU in all)",
		a.Name, sent, float64(cpu.Microseconds())/1000/float64(sent), cpu)
	if d := metric(httpAddr, "runnel_edge_duplicates_total"); d != 50 {
		t.Errorf("runnel_edge_duplicates_total %v, want 50 (the resent readings)", d)
	}
	results.close()
	if err := compare(results.latest(), want); err != nil {
		t.Errorf("results published on the embedded broker: %v", err)
	}

	// The file output, after a clean stop. (The outbox keeps nothing
	// here: without a hub output an entry goes once the MQTT output has
	// published it.)
	p.Cmd.Process.Signal(syscall.SIGTERM)
	if err := p.Cmd.Wait(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	out, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := compare(parseResults(t, out), want); err != nil {
		t.Errorf("file output: %v\n%.2000s", err, out)
	}
}

// compare checks got (device/window_start -> result, the flush reading's
// window aside) against want: counts and sums exact, averages within a
// relative 1e-9.
func compare(got, want map[string]window) error {
	var problems []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			problems = append(problems, "missing window "+k)
		case g.n != w.n || g.sum != w.sum || !closeTo(g.avg, w.avg, 1e-9):
			problems = append(problems, fmt.Sprintf("window %s: n=%d sum=%d avg=%v, want n=%d sum=%d avg=%v", k, g.n, g.sum, g.avg, w.n, w.sum, w.avg))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && !strings.HasPrefix(k, "d99/") {
			problems = append(problems, "unexpected window "+k)
		}
	}
	if n := len(problems); n > 0 {
		sort.Strings(problems)
		if n > 10 {
			problems = append(problems[:10], fmt.Sprintf("and %d more", n-10))
		}
		return fmt.Errorf("%d problems in %d windows:\n%s", n, len(want), strings.Join(problems, "\n"))
	}
	return nil
}

// parseResults reads result lines (replay's and the outbox's JSON) into
// the latest version of each device/window_start.
func parseResults(t *testing.T, b []byte) map[string]window {
	t.Helper()
	out := map[string]window{}
	ver := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		k, w, v, err := parseResult(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if v >= ver[k] {
			out[k], ver[k] = w, v
		}
	}
	return out
}

func parseResult(line []byte) (key string, w window, version int, err error) {
	var r struct {
		Key         struct{ Device string } `json:"key"`
		WindowStart int64                   `json:"window_start"`
		Version     int                     `json:"version"`
		Values      struct {
			N   int64   `json:"n"`
			Sum float64 `json:"sum"`
			Avg float64 `json:"avg"`
		} `json:"values"`
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return "", window{}, 0, fmt.Errorf("result %q: %w", line, err)
	}
	return fmt.Sprintf("%s/%d", r.Key.Device, r.WindowStart), window{n: r.Values.N, sum: int64(r.Values.Sum), avg: r.Values.Avg}, r.Version, nil
}

// resultSub collects the results published on a topic.
type resultSub struct {
	t   *testing.T
	cli *paho.Client
	mu  sync.Mutex
	got map[string]window
	ver map[string]int
	bad error
}

func subscribe(t *testing.T, hostPort, topic string) *resultSub {
	s := &resultSub{t: t, got: map[string]window{}, ver: map[string]int{}}
	cli, err := testbroker.Dial(context.Background(), hostPort, paho.ClientConfig{ClientID: "qemu-results",
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			k, w, v, err := parseResult(pr.Packet.Payload)
			s.mu.Lock()
			defer s.mu.Unlock()
			if err != nil {
				s.bad = err
			} else if v >= s.ver[k] {
				s.got[k], s.ver[k] = w, v
			}
			return true, nil
		}}}, &paho.Connect{ClientID: "qemu-results", CleanStart: true, KeepAlive: 30})
	if err != nil {
		t.Fatal(err)
	}
	s.cli = cli
	if _, err := cli.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

func (s *resultSub) latest() map[string]window {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bad != nil {
		s.t.Errorf("results topic: %v", s.bad)
		s.bad = nil
	}
	out := make(map[string]window, len(s.got))
	for k, w := range s.got {
		if !strings.HasPrefix(k, "d99/") {
			out[k] = w
		}
	}
	return out
}

func (s *resultSub) close() {
	if s.cli != nil {
		s.cli.Disconnect(&paho.Disconnect{})
		<-s.cli.Done()
		s.cli = nil
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, b)
	}
}

// metric sums the series of name on the node's /metrics (-1: none).
func metric(addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum, found := 0.0, false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err == nil {
				sum, found = sum+v, true
			}
		}
	}
	if !found {
		return -1
	}
	return sum
}

func waitMetric(t *testing.T, addr, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for metric(addr, name) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v after 60 s, want %v", name, metric(addr, name), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cpuTime is the user and system CPU time of process pid so far
// (/proc/PID/stat, in clock ticks of 10 ms).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
