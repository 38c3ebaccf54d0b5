package edge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/internal/oracle"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/window"
)

// The managed pipeline of these tests, revision 1: counts per device in
// 1 s windows. rev2 is a compatible change of it (lateness), rev2x an
// incompatible one (2 s windows).
const managedSpec = `name: counts
source: {mqtt: {topic: "m/#", qos: 1}}
event_time: {field: ts}
key: [dev]
watermark: {max_out_of_order: 300ms}
window: {tumbling: 1s}
allowed_lateness: 500ms
aggregates: {n: count()}
`

func desired(gen uint64, revs ...string) *runnelv1.DesiredSet {
	d := &runnelv1.DesiredSet{Generation: gen}
	for i, s := range revs {
		sum := sha256.Sum256([]byte(s))
		d.Pipelines = append(d.Pipelines, &runnelv1.DesiredPipeline{Name: "counts", Revision: uint32(gen), Spec: s,
			Hash: hex.EncodeToString(sum[:]), CompatClass: uint32(i + 1)})
	}
	return d
}

// managedNode opens and runs a node managed by a hub that is never there:
// the tests hand it sets themselves (n.apply), as the agent does.
func managedNode(t *testing.T, data, broker string) (*node, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	cfg := &NodeConfig{EdgeID: "managed", DataDir: data, NoSync: true, CheckpointInterval: 50 * time.Millisecond,
		Uplink: &uplink.Config{Hub: "127.0.0.1:1", Insecure: true, BackoffMin: time.Hour},
		Fleet:  &FleetConfig{}, Started: func(string) { close(started) }}
	cfg.Broker.Brokers = []string{broker}
	// A session of its own per test: messages a stopped node took but had
	// not yet acknowledged would come again to the next test's node.
	cfg.Broker.ClientID = "runnel-" + strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	n, err := open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.run(ctx) }()
	select {
	case <-started:
	case err := <-done:
		cancel()
		t.Fatalf("node stopped at start: %v", err)
	}
	return n, func() error { cancel(); return <-done }
}

type reading struct {
	dev string
	ts  int64
}

// readings makes a stream of n readings of a few devices, mostly in order
// with some out of order, over about n*10 ms of event time.
func readings(rng *rand.Rand, n int) []reading {
	base := int64(1_700_000_000_000)
	rs := make([]reading, n)
	for i := range rs {
		rs[i] = reading{dev: fmt.Sprintf("d%d", rng.IntN(4)), ts: base + int64(i*10) - rng.Int64N(250)}
	}
	return rs
}

type winKey struct {
	key        string
	start, end int64
}

// latestByRevision reads the stopped node's outbox: per revision, the
// count of the latest version of each window.
func latestByRevision(t *testing.T, data string, p *operators.Pipeline) map[uint32]map[winKey]int64 {
	t.Helper()
	out := map[uint32]map[winKey]int64{}
	vers := map[uint32]map[winKey]uint32{}
	err := ReadOutbox(context.Background(), data, func(e OutboxEntry) error {
		if e.Marker || e.Quarantined {
			return nil
		}
		k, err := p.AppendKeyJSON(nil, e.Result.Key)
		if err != nil {
			return err
		}
		st := p.Aggregates.New()
		if err := p.Aggregates.Decode(st, e.Result.State); err != nil {
			return err
		}
		if out[e.Revision] == nil {
			out[e.Revision], vers[e.Revision] = map[winKey]int64{}, map[winKey]uint32{}
		}
		w := winKey{string(k), e.Result.Start, e.Result.End}
		if e.Result.Version >= vers[e.Revision][w] {
			vers[e.Revision][w], out[e.Revision][w] = e.Result.Version, p.Aggregates.Result(st, 0).Int
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// oracleLatest runs the oracle over rs: the count of the latest version
// of each window emitted, with or without the end of input's firing.
func oracleLatest(rs []reading, size int64, endOfInput bool) map[winKey]int64 {
	evs := make([]oracle.Event, len(rs))
	for i, r := range rs {
		evs[i] = oracle.Event{Key: fmt.Sprintf(`{"dev":%q}`, r.dev), Time: r.ts}
	}
	ems, _ := oracle.Run(evs, oracle.Config{Kind: oracle.Tumbling, Size: size, Slide: size, MaxOutOfOrder: 300, Lateness: 500})
	out := map[winKey]int64{}
	for _, e := range ems {
		if e.Step == len(evs) && !endOfInput {
			continue
		}
		out[winKey{e.Key, e.Start, e.End}] = int64(len(e.Members))
	}
	return out
}

func sameCounts(a, b map[winKey]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestManagedChangeExactlyOnce: a known stream through Mosquitto while the
// managed pipeline changes from revision 1 to 2 in the middle of it. A
// compatible change keeps the window state: the latest results over both
// revisions equal the oracle over the whole stream. An incompatible one
// fires revision 1's open windows and starts revision 2 empty: there is a
// split point k such that revision 1's results equal the oracle over the
// first k readings with the end of input, and revision 2's the oracle over
// the rest; nothing is lost or counted twice. A restart runs the applied
// set without a hub.
func TestManagedChangeExactlyOnce(t *testing.T) {
	mosq := testbroker.Start(t)
	for _, c := range []struct {
		name       string
		rev2       string
		compatible bool
	}{
		{"compatible", strings.Replace(managedSpec, "allowed_lateness: 500ms", "allowed_lateness: 500ms\nfilter: \"ts > 0\"", 1), true},
		{"incompatible", strings.Replace(managedSpec, "tumbling: 1s", "tumbling: 2s", 1), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			n, stop := managedNode(t, data, mosq.Addr())
			if err := n.apply(context.Background(), desired(1, managedSpec), mustCompile(desired(1, managedSpec))); err != nil {
				t.Fatal(err)
			}
			pub := testbroker.NewPublisher(t, mosq.HostPort())
			rs := readings(rand.New(rand.NewPCG(1, uint64(len(c.name)))), 1200)
			set2 := desired(2, c.rev2)
			if c.compatible {
				set2.Pipelines[0].CompatClass = 1
			}
			applied := make(chan error, 1)
			// The switch is asked for once the first half is in (so that
			// revision 1 has fired windows), while the rest streams in.
			for i, r := range rs {
				pub.MustPublish("m/"+r.dev, fmt.Appendf(nil, `{"dev":%q,"ts":%d}`, r.dev, r.ts), 1)
				if i == len(rs)/2 {
					waitFed(t, n, uint64(i+1))
					go func() { applied <- n.apply(context.Background(), set2, mustCompile(set2)) }()
				}
			}
			if err := <-applied; err != nil {
				t.Fatal(err)
			}
			waitFed(t, n, uint64(len(rs)))
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			p1, _ := operators.CompileYAML("r1", []byte(managedSpec))
			got := latestByRevision(t, data, p1)
			if len(got[1]) == 0 || len(got[2]) == 0 {
				t.Fatalf("results by revision: %d of 1, %d of 2; want both", len(got[1]), len(got[2]))
			}
			if c.compatible {
				all := map[winKey]int64{}
				for _, rev := range []uint32{1, 2} {
					for k, v := range got[rev] {
						all[k] = v // revision 2's versions come after revision 1's
					}
				}
				if want := oracleLatest(rs, 1000, false); !sameCounts(all, want) {
					t.Fatalf("compatible change: %d windows, oracle %d; they differ", len(all), len(want))
				}
			} else {
				found := -1
				for k := 0; k <= len(rs) && found < 0; k++ {
					if sameCounts(got[1], oracleLatest(rs[:k], 1000, true)) && sameCounts(got[2], oracleLatest(rs[k:], 2000, false)) {
						found = k
					}
				}
				if found < 0 {
					t.Fatalf("incompatible change: no split point gives the results (%d windows of revision 1, %d of 2)", len(got[1]), len(got[2]))
				}
				t.Logf("switched after reading %d of %d", found, len(rs))
				// Revision 1's last marker is the end of time: the hub
				// waits for nothing more of it from this edge.
				var last int64
				err := ReadOutbox(context.Background(), data, func(e OutboxEntry) error {
					if e.Marker && e.Revision == 1 {
						last = e.Watermark
					}
					return nil
				})
				if err != nil || last != window.MaxTime {
					t.Errorf("revision 1's last watermark marker is %d (%v), want the end of time", last, err)
				}
			}
			// Restarted with no hub, the node runs the applied set.
			n, stop = managedNode(t, data, mosq.Addr())
			if v := *n.pipeView.Load(); len(v) != 1 || v[0].def.rev != 2 {
				t.Fatalf("after a restart the node runs %d pipelines, want revision 2", len(v))
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waitFed waits until the pump has fed want records: in a fresh data dir,
// the first want messages (the source counts a message when it takes it,
// before it is durable, so its count alone says too little).
func waitFed(t *testing.T, n *node, want uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for n.pumpPos.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("received %d messages of %d; pump at %d, log durable to %d", n.status.src.Load().Stats().Received, want, n.pumpPos.Load(), n.log.Durable())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestManagedRefusals: a desired set that does not compile, names a
// pipeline of a local file, or has a file output is refused with every
// problem and changes nothing: the node runs what it ran, and the state
// file keeps the set applied before.
func TestManagedRefusals(t *testing.T) {
	mosq := testbroker.Start(t)
	data := filepath.Join(t.TempDir(), "data")
	n, stop := managedNode(t, data, mosq.Addr())
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	good := desired(1, managedSpec)
	n.applyDesired(context.Background(), good, func() error { return nil })
	if ok := n.agentOK(); !ok {
		t.Fatalf("a good set: apply error %q", n.agent.applyErr)
	}
	local, _ := operators.CompileYAML("local.yaml", []byte(strings.Replace(managedSpec, "name: counts", "name: local", 1)))
	n.cfg.Pipelines = []*operators.Pipeline{local} // as if the node had a local file of that name
	for _, c := range []struct {
		name, spec string
		want       []string
	}{
		{"bad spec", strings.Replace(managedSpec, "tumbling: 1s", "tumbling: -1s", 1) + "bogus: 1\n", []string{"counts@2:", "window", "bogus"}},
		{"local name", strings.Replace(managedSpec, "name: counts", "name: local", 1), []string{"local.yaml is managed by the hub"}},
		{"file output", managedSpec + "outputs: [{file: {path: /etc/passwd}}]\n", []string{"may not write files"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := desired(2, c.spec)
			if strings.Contains(c.name, "local") {
				bad.Pipelines[0].Name = "local"
			}
			n.applyDesired(context.Background(), bad, func() error { return nil })
			n.agent.mu.Lock()
			gen, why := n.agent.generation, n.agent.applyErr
			n.agent.mu.Unlock()
			if gen != 2 {
				t.Errorf("generation %d, want 2 (refused sets are answered too)", gen)
			}
			for _, w := range c.want {
				if !strings.Contains(why, w) {
					t.Errorf("apply error %q does not say %q", why, w)
				}
			}
			if v := *n.pipeView.Load(); len(v) != 1 || v[0].def.rev != 1 || v[0].p.Name != "counts" {
				t.Errorf("the node runs %d pipelines after a refusal, want counts@1", len(v))
			}
			if set, err := n.loadApplied(); err != nil || !sameSet(set, good) {
				t.Errorf("stored set after a refusal: %v, %v", set, err)
			}
			st := n.edgeStatus(time.Now())
			if st.GetApplyError() == "" || st.GetAppliedGeneration() != 2 {
				t.Errorf("status after a refusal: %v", st)
			}
		})
	}
}

func (n *node) agentOK() bool {
	n.agent.mu.Lock()
	defer n.agent.mu.Unlock()
	return n.agent.applyErr == ""
}
