// Package e2e holds the system tests: real runnel-edge and runnel-hub
// processes, a real Mosquitto, real gRPC through a fault-injecting proxy.
package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testproc"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// fleetSpec is the pipeline every edge runs (EDGE: its id, so that each
// reads its own topics) and the hub merges. Lines span edges: every
// window of a line merges partials from many edges.
const fleetSpec = `name: fleet
source: {mqtt: {topic: "fleet/EDGE/+/r", qos: 1, topic_fields: {line: 2}}}
event_time: {field: ts, unit: ms}
event_id: [sensor, seq]
key: [line]
watermark: {max_out_of_order: 2s}
window: {tumbling: 1s}
allowed_lateness: 1h
aggregates: {n: count(), sum: sum(v), lo: min(v), hi: max(v)}
`

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// fault is one network fault the proxy can inject.
type fault struct {
	name  string
	toxic string // JSON; "" for a cut of every connection
}

var faults = []fault{
	{"latency", `{"name":"f","type":"latency","stream":"upstream","attributes":{"latency":150,"jitter":100}}`},
	{"latency-down", `{"name":"f","type":"latency","stream":"downstream","attributes":{"latency":300,"jitter":200}}`},
	{"bandwidth", `{"name":"f","type":"bandwidth","stream":"upstream","attributes":{"rate":16}}`},
	{"reset", `{"name":"f","type":"reset_peer","stream":"upstream","attributes":{"timeout":200}}`},
	{"timeout", `{"name":"f","type":"timeout","stream":"downstream","attributes":{"timeout":400}}`},
	{"limit-data", `{"name":"f","type":"limit_data","stream":"upstream","attributes":{"bytes":20000}}`},
	{"slicer", `{"name":"f","type":"slicer","stream":"upstream","attributes":{"average_size":64,"size_variation":32,"delay":200}}`},
	{"cut", ""},
}

// TestFleetExactlyOnceUnderFaults: 20 runnel-edge processes uplink to a
// runnel-hub process through a toxiproxy proxy that injects latency,
// bandwidth limits, resets, timeouts, data limits and connection cuts,
// while edges and the hub are killed with SIGKILL at random moments. A
// publisher sends a known stream through Mosquitto. In the end the hub's
// merged results equal the oracle over every reading sent: nothing lost,
// nothing counted twice.
func TestFleetExactlyOnceUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test: 20 edge processes for half a minute")
	}
	const (
		edges    = 20
		steps    = 300 // readings per sensor
		lineKeys = 4
	)
	dir := t.TempDir()
	testproc.Build(t, dir, "../../cmd/runnel-edge", "../../cmd/runnel-hub")
	mosq := testbroker.Start(t)

	hubAddr := freePort(t)
	var tokens strings.Builder
	for e := range edges {
		fmt.Fprintf(&tokens, "e%02d fleet-token-%02d-0123456789\n", e, e)
	}
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hubSpec := write("hub.yaml", strings.ReplaceAll(fleetSpec, "EDGE", "+"))
	tokFile := write("tokens", tokens.String())
	hub := &testproc.Proc{Name: "hub", Args: []string{filepath.Join(dir, "runnel-hub"), "--data-dir", filepath.Join(dir, "hub"),
		"--pipeline", hubSpec, "--grpc-addr", hubAddr, "--http-addr", "127.0.0.1:0", "--edge-tokens-file", tokFile,
		"--edge-timeout", "2s", "--commit-interval", "20ms"}}
	hub.Start(t)
	defer func() { hub.Kill() }()

	// The proxy every uplink goes through.
	tp := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxy := toxiproxy.NewProxy(tp, "hub", freePort(t), hubAddr)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer proxy.Stop()

	procs := make([]*testproc.Proc, edges)
	for e := range edges {
		id := fmt.Sprintf("e%02d", e)
		spec := write(id+".yaml", strings.ReplaceAll(fleetSpec, "EDGE", id))
		procs[e] = &testproc.Proc{Name: id, Args: []string{filepath.Join(dir, "runnel-edge"), "run", "--pipeline", spec,
			"--data-dir", filepath.Join(dir, id), "--broker-url", mosq.Addr(), "--edge-id", id,
			"--checkpoint-interval", "100ms", "--http-addr=", "--uplink-hub", proxy.Listen,
			"--uplink-token", fmt.Sprintf("fleet-token-%02d-0123456789", e), "--uplink-insecure"}}
		procs[e].Start(t)
	}
	defer func() {
		for _, p := range procs {
			p.Kill()
		}
	}()
	// Every edge has its persistent session before the first reading.
	for _, p := range procs {
		p.WaitLog(t, "edge: ready")
	}

	type reading struct {
		edge, line, sensor, seq int
		ts, v                   int64
	}
	rng := rand.New(rand.NewPCG(21, 22))
	base := int64(1_767_225_600_000)
	var stream []reading
	for s := range steps {
		for e := range edges {
			stream = append(stream, reading{edge: e, line: (e + s) % lineKeys, sensor: s % 3, seq: s,
				ts: base + int64(s)*100 - rng.Int64N(1500), v: rng.Int64N(1000) - 200})
		}
	}
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		pub := testbroker.NewPublisher(t, mosq.HostPort())
		defer pub.Close()
		for i, r := range stream {
			topic := fmt.Sprintf("fleet/e%02d/L%d/r", r.edge, r.line)
			payload := fmt.Appendf(nil, `{"sensor":"e%02d-%d","seq":%d,"ts":%d,"v":%d}`, r.edge, r.sensor, r.seq, r.ts, r.v)
			if err := pub.PublishAsync(context.Background(), topic, payload, 1); err != nil {
				t.Errorf("publish: %v", err)
				return
			}
			if i%edges == edges-1 {
				time.Sleep(60 * time.Millisecond) // ~20 s in all
			}
		}
	}()

	// Faults and kills until the stream is out and at least 20 kills and
	// 20 faults happened.
	var hubKills, edgeKills, nFaults int
	faultCount := map[string]int{}
	next := time.Now()
	for !isClosed(pubDone) || hubKills+edgeKills < 25 || nFaults < 20 {
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		switch x := rng.IntN(10); {
		case x < 5: // a network fault for a while
			f := faults[rng.IntN(len(faults))]
			proxy.Toxics.ResetToxics(context.Background())
			if f.toxic == "" {
				proxy.Stop()
				time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
				if err := proxy.Start(); err != nil {
					t.Fatal(err)
				}
			} else if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(f.toxic)); err != nil {
				t.Fatalf("toxic %s: %v", f.name, err)
			}
			nFaults++
			faultCount[f.name]++
		case x < 6 && time.Now().After(next): // the hub, at most every 2 s
			hub.Kill()
			hubKills++
			hub.Start(t)
			next = time.Now().Add(2 * time.Second)
		case x < 9:
			p := procs[rng.IntN(edges)]
			p.Kill()
			edgeKills++
			p.Start(t)
		default:
			proxy.Toxics.ResetToxics(context.Background())
		}
	}
	proxy.Toxics.ResetToxics(context.Background())
	<-pubDone
	// A last reading per edge far ahead moves every watermark past every
	// window; it lands in a window of its own, left out below.
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	for e := range edges {
		pub.MustPublish(fmt.Sprintf("fleet/e%02d/flush/r", e), fmt.Appendf(nil, `{"sensor":"e%02d-f","seq":0,"ts":%d,"v":0}`, e, base+3_600_000), 1)
	}
	pub.Close()

	type agg struct{ n, sum, lo, hi int64 }
	want := map[string]agg{}
	for _, r := range stream {
		k := fmt.Sprintf("L%d/%d", r.line, (r.ts/1000)*1000)
		a, ok := want[k]
		if !ok {
			a = agg{lo: r.v, hi: r.v}
		}
		a.n++
		a.sum += r.v
		a.lo, a.hi = min(a.lo, r.v), max(a.hi, r.v)
		want[k] = a
	}

	conn, err := grpc.NewClient(hubAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	results := runnelv1.NewResultsClient(conn)
	query := func() (map[string]agg, error) {
		got := map[string]agg{}
		req := &runnelv1.QueryResultsRequest{Pipeline: "fleet", Limit: 10000}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := results.QueryResults(ctx, req)
			cancel()
			if err != nil {
				return nil, err
			}
			for _, r := range resp.Results {
				line := r.Key.Fields["line"].GetStringValue()
				if line == "flush" {
					continue
				}
				v := r.Values.Fields
				got[fmt.Sprintf("%s/%d", line, r.WindowStart)] = agg{int64(v["n"].GetNumberValue()), int64(v["sum"].GetNumberValue()),
					int64(v["lo"].GetNumberValue()), int64(v["hi"].GetNumberValue())}
			}
			if resp.NextPageToken == "" {
				return got, nil
			}
			req.PageToken = resp.NextPageToken
		}
	}
	diff := func(got map[string]agg) []string {
		var bad []string
		for k, w := range want {
			if g, ok := got[k]; !ok || g != w {
				bad = append(bad, fmt.Sprintf("window %s: got %+v (present %v), want %+v", k, g, ok, w))
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				bad = append(bad, fmt.Sprintf("unexpected window %s", k))
			}
		}
		return bad
	}
	var bad []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		got, err := query()
		if err == nil {
			if bad = diff(got); len(bad) == 0 {
				break
			}
		} else {
			bad = []string{err.Error()}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("fleet test: %d edges, %d readings, %d windows; injected %d network faults %v, %d hub SIGKILLs, %d edge SIGKILLs",
		edges, len(stream), len(want), nFaults, faultCount, hubKills, edgeKills)
	if len(bad) > 0 {
		for i, b := range bad {
			if i == 15 {
				t.Errorf("... %d more", len(bad)-i)
				break
			}
			t.Error(b)
		}
		t.Logf("hub log tail:\n%s", tail(hub.Logs.String(), 3000))
		t.FailNow()
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
