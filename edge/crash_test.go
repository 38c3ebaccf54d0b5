package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testproc"
)

const crashSpec = `name: crash
source: {mqtt: {topic: "plant/+/temp", qos: 1}}
event_time: {field: ts, unit: ms}
event_id: [device, seq]
key: [device]
watermark: {max_out_of_order: 2s}
window: {tumbling: 1s}
allowed_lateness: 1m
aggregates: {n: count(), sum: sum(v)}
`

// edgeProc is one runnel-edge process of the crash test.
type edgeProc struct {
	cmd    *exec.Cmd
	stderr *testproc.Buffer
}

// TestCrashExactlyOnce kills a real runnel-edge process with SIGKILL at
// random moments while publishers send a known stream (QoS 1, with an
// event id): through a real Mosquitto, which keeps the edge's session
// while it is down, and to the edge's embedded broker, which dies with it,
// so four publishers reconnect and send again what had no PUBACK. After
// the last restart the window results in the node's outbox equal the
// oracle: every reading counted once, none lost, none twice. With the
// embedded broker a PUBACK sent before the reading was durable would
// lose it.
func TestCrashExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: starts processes for several seconds")
	}
	t.Run("broker=mosquitto", func(t *testing.T) { crashExactlyOnce(t, false, 0) })
	t.Run("broker=embedded", func(t *testing.T) { crashExactlyOnce(t, true, 0) })
	// With a group commit every second (and Mosquitto keeping 1024
	// messages in flight), almost every kill lands while a batch has been
	// read and appended but not yet made durable or acknowledged.
	t.Run("broker=mosquitto/uncommitted-batches", func(t *testing.T) {
		crashExactlyOnce(t, false, 0, "--ingest-log-sync-delay", "1s")
	})
	// With 16 KiB segments the log rolls every few hundred readings and
	// writes each new segment over the spare file of one a checkpoint
	// freed; the stream is paced (2 ms a reading) so that it lasts through
	// the kills, which then land in segments that hold an older segment's
	// bytes after their last frame.
	t.Run("broker=mosquitto/spare-segments", func(t *testing.T) {
		crashExactlyOnce(t, false, 2*time.Millisecond, "--ingest-log-segment-size", "16KiB")
	})
}

// crashExactlyOnce runs the crash test; pace, when not 0, is a pause
// between two readings the Mosquitto publisher sends.
func crashExactlyOnce(t *testing.T, embedded bool, pace time.Duration, extraArgs ...string) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "runnel-edge")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/runnel-edge").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	specPath := filepath.Join(dir, "crash.yaml")
	if err := os.WriteFile(specPath, []byte(crashSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	var hostPort string
	args := []string{"run", "--pipeline", specPath, "--data-dir", data, "--edge-id", "crash", "--checkpoint-interval", "100ms", "--http-addr="}
	args = append(args, extraArgs...)
	if embedded {
		hostPort = freeAddr(t)
	} else {
		mosq := testbroker.Start(t)
		hostPort = mosq.HostPort()
		args = append(args, "--broker-url", mosq.Addr())
	}

	start := func() *edgeProc {
		p := &edgeProc{stderr: &testproc.Buffer{}}
		p.cmd = exec.Command(bin, args...)
		p.cmd.Env = append(os.Environ(), "RUNNEL_EMBEDDED_BROKER_ADDR="+hostPort)
		p.cmd.Stderr = p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	waitConnected := func(p *edgeProc) {
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(p.stderr.String(), "edge: ready") {
			if time.Now().After(deadline) {
				t.Fatalf("edge did not connect:\n%s", p.stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// The first start creates the persistent session, so nothing published
	// from now on is lost by the broker while the edge is down.
	p := start()
	waitConnected(p)

	const devices, perDevice = 8, 400
	rng := rand.New(rand.NewPCG(11, 12))
	type reading struct {
		dev, seq int
		ts, v    int64
	}
	var stream []reading
	base := int64(1_767_225_600_000)
	for i := range devices * perDevice {
		stream = append(stream, reading{dev: i % devices, seq: i / devices, ts: base + int64(i)*5 - rng.Int64N(500), v: rng.Int64N(100)})
	}
	pubDone := make(chan struct{})
	if embedded {
		// Four publishers, two devices each, each sending a reading until
		// it has its PUBACK, reconnecting as the broker comes back.
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				pub := &retryPublisher{t: t, hostPort: hostPort, id: fmt.Sprintf("pub-%d", w)}
				defer pub.close()
				for _, r := range stream {
					if r.dev%4 == w {
						pub.publish("plant/north/temp", fmt.Appendf(nil, `{"device":"d%d","seq":%d,"ts":%d,"v":%d}`, r.dev, r.seq, r.ts, r.v))
					}
				}
			})
		}
		go func() { wg.Wait(); close(pubDone) }()
	} else {
		go func() {
			defer close(pubDone)
			pub := testbroker.NewPublisher(t, hostPort)
			defer pub.Close()
			for _, r := range stream {
				payload := fmt.Appendf(nil, `{"device":"d%d","seq":%d,"ts":%d,"v":%d}`, r.dev, r.seq, r.ts, r.v)
				if err := pub.Publish(context.Background(), "plant/north/temp", payload, 1); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				time.Sleep(pace)
			}
		}()
	}

	// Through Mosquitto, kills go on until the stream is all sent. The
	// embedded broker dies with each kill and its publishers wait for the
	// next start, so there 20 kills come first and the stream is finished
	// without.
	kills, killedInRecycled := 0, 0
	for kills < 20 || (!embedded && !isClosed(pubDone)) {
		time.Sleep(time.Duration(50+rng.IntN(350)) * time.Millisecond)
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		p.cmd.Wait()
		kills++
		killedInRecycled += recycledLast(filepath.Join(data, "log"))
		p = start()
	}
	<-pubDone
	// A last reading far ahead moves the watermark past every window.
	waitConnected(p)
	pub := &retryPublisher{t: t, hostPort: hostPort, id: "flush"}
	pub.publish("plant/north/temp", fmt.Appendf(nil, `{"device":"flush","seq":0,"ts":%d,"v":0}`, base+3_600_000))
	pub.close()

	want := map[string][2]int64{} // device/window -> count, sum
	for _, r := range stream {
		w := (r.ts / 1000) * 1000
		k := fmt.Sprintf("d%d/%d", r.dev, w)
		c := want[k]
		want[k] = [2]int64{c[0] + 1, c[1] + r.v}
	}

	var got map[string][2]int64
	for attempt := 0; ; attempt++ {
		time.Sleep(2 * time.Second)
		p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("edge exit: %v\n%s", err, p.stderr.String())
		}
		got = readOutbox(t, bin, data, specPath)
		if len(got) >= len(want) || attempt == 4 {
			break
		}
		p = start()
	}
	t.Logf("crash test: %d SIGKILLs, %d readings, %d windows", kills, len(stream), len(want))
	if slices.Contains(extraArgs, "--ingest-log-segment-size") {
		t.Logf("%d kills left the log's last segment written over a spare file", killedInRecycled)
		if killedInRecycled == 0 {
			t.Error("no kill landed in a segment written over a spare file")
		}
	}
	bad := 0
	for k, w := range want {
		if g := got[k]; g != w {
			if bad++; bad <= 10 {
				t.Errorf("window %s: got count,sum %v, want %v", k, g, w)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected window %s", k)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d windows wrong after %d kills", bad, len(want), kills)
	}
}

// retryPublisher sends QoS 1 messages one at a time, each until the broker
// acknowledges it, reconnecting whenever the connection (or the broker)
// is gone.
type retryPublisher struct {
	t        *testing.T
	hostPort string
	id       string
	cli      *paho.Client
	failed   bool
}

func (p *retryPublisher) publish(topic string, payload []byte) {
	if p.failed {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if p.cli == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			cli, err := testbroker.Dial(ctx, p.hostPort, paho.ClientConfig{ClientID: p.id}, &paho.Connect{ClientID: p.id, CleanStart: true, KeepAlive: 30})
			cancel()
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			p.cli = cli
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := p.cli.Publish(ctx, &paho.Publish{Topic: topic, Payload: payload, QoS: 1})
		cancel()
		if err == nil {
			return
		}
		p.close()
	}
	p.failed = true
	p.t.Errorf("%s: no PUBACK for 30 s", p.id)
}

func (p *retryPublisher) close() {
	if p.cli != nil {
		_ = p.cli.Disconnect(&paho.Disconnect{})
		<-p.cli.Done()
		p.cli = nil
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// readOutbox returns the latest version of every window result in the
// node's outbox, as device/window_start -> (count, sum).
func readOutbox(t *testing.T, bin, data, specPath string) map[string][2]int64 {
	out, err := exec.Command(bin, "outbox", "--data-dir", data, "--pipeline", specPath).Output()
	if err != nil {
		t.Fatalf("outbox: %v", err)
	}
	got := map[string][2]int64{}
	ver := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		var r struct {
			Key         map[string]any `json:"key"`
			WindowStart int64          `json:"window_start"`
			Version     int            `json:"version"`
			Values      struct {
				N   int64   `json:"n"`
				Sum float64 `json:"sum"`
			} `json:"values"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("outbox line %q: %v", line, err)
		}
		if r.Key["device"] == "flush" {
			continue
		}
		k := fmt.Sprintf("%v/%d", r.Key["device"], r.WindowStart)
		if r.Version > ver[k] {
			ver[k] = r.Version
			got[k] = [2]int64{r.Values.N, int64(r.Values.Sum)}
		} else if r.Version == ver[k] {
			t.Errorf("window %s version %d twice in the outbox", k, r.Version)
		}
	}
	return got
}

// recycledLast reports (1 or 0) whether the last segment of the ingest log
// in dir was written over a spare file: its header's recycled flag
// (docs/formats/ingest-log.md).
func recycledLast(dir string) int {
	names, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(names) == 0 {
		return 0
	}
	b, err := os.ReadFile(slices.Max(names))
	if err != nil || len(b) < 6 || b[4] != 2 || b[5]&1 == 0 {
		return 0
	}
	return 1
}
