package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/internal/oracle"
	"github.com/runnel-io/runnel/internal/testbroker"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// The control plane end to end (issue 12): real runnel-hub and
// runnel-edge processes, real gRPC on loopback, Mosquitto, toxiproxy.
// The hub is driven through its Fleet API with its admin token and read
// through its Results API. Each edge that reads data has a Mosquitto of
// its own, as a gateway has its local broker: a managed pipeline is one
// spec for every edge, so edges sharing a broker would all read every
// reading.

// convSpec is the pipeline of TestFleetOfflineConvergence; revision 2
// changes the allowed lateness only (compatible: the hub merges both
// revisions into the same windows).
const convSpec = `name: conv
source: {mqtt: {topic: "conv/+/r", qos: 1, topic_fields: {line: 1}}}
event_time: {field: ts, unit: ms}
event_id: [sensor, seq]
key: [line]
watermark: {max_out_of_order: 2s}
window: {tumbling: 1s}
allowed_lateness: 1h
aggregates: {n: count(), sum: sum(v)}
`

// TestFleetOfflineConvergence: a hub and 4 edges (labels differ), each
// edge linked to the hub through a proxy of its own. Revision 1 is
// deployed to all. Then one edge is killed (SIGKILL) and another's link
// cut, and a staged rollout of revision 2 starts (canary 1, then 100%,
// short soak): the canary passes and the rollout waits at its second
// step for the missing edges. The cut edge is restarted while the hub is
// unreachable: it runs its last applied set (revision 1, per its
// /metrics) and goes on counting into its outbox. The hub is killed
// (SIGKILL) and restarted on its data dir: the rollout is where it was.
// The edges come back (the killed one restarted, the link restored): the
// cut edge's outbox drains, every edge converges to revision 2, the
// rollout succeeds, and the hub's merged results equal the sum of every
// reading published to any edge in any phase: nothing lost, nothing
// counted twice.
func TestFleetOfflineConvergence(t *testing.T) {
	if testing.Short() {
		t.Skip("control plane end to end: real processes")
	}
	ids := []string{"c1", "c2", "c3", "c4"}
	labels := [][]string{{"site=north", "hw=rpi4"}, {"site=north", "hw=cm4"}, {"site=south", "hw=rpi4"}, {"site=south", "hw=cm4"}}
	f := newCtlFleet(t, ids...)
	edges := map[string]*ctlEdge{}
	pubs := map[string]*testbroker.Publisher{}
	for i, id := range ids {
		b := testbroker.Start(t)
		edges[id] = f.addEdge(id, b, true, labels[i]...)
		pubs[id] = ctlPublisher(t, b)
	}
	f.waitRegistered(30*time.Second, ids...)
	killed, cut := edges["c2"], edges["c3"]

	if r := f.applyPipeline(convSpec); r.Revision != 1 {
		t.Fatalf("first revision %d", r.Revision)
	}
	f.deploy(&runnelv1.DeploymentSpec{Name: "conv", Selector: "site in (north,south)", Pipelines: []*runnelv1.PipelineRef{{Name: "conv"}}})
	f.waitRollout(30*time.Second, "conv", 1, "succeeded")
	f.waitRunning(30*time.Second, map[string]uint32{"conv": 1}, ids...)

	// The oracle: every reading published, summed per line and window.
	type agg struct{ n, sum int64 }
	want := map[string]agg{}
	rng := rand.New(rand.NewPCG(12, 5))
	base := time.Now().Add(-20*time.Minute).UnixMilli() / 1000 * 1000
	const phaseLen = 10_000 // ms of event time per phase
	publish := func(id string, phase, n int) {
		t.Helper()
		for i := range n {
			line := i % 3
			ts := base + int64(phase*phaseLen) + int64(i)*50 - rng.Int64N(800)
			v := rng.Int64N(100) - 20
			pubs[id].MustPublish(fmt.Sprintf("conv/L%d/r", line),
				fmt.Appendf(nil, `{"sensor":"%s-%d","seq":%d,"ts":%d,"v":%d}`, id, phase, i, ts, v), 1)
			k := fmt.Sprintf("L%d/%d", line, ts/1000*1000)
			want[k] = agg{want[k].n + 1, want[k].sum + v}
		}
	}
	for _, id := range ids {
		publish(id, 0, 120)
	}

	// Offline: c2 killed, c3's link cut. Readings go on at every broker;
	// c2's waits in its persistent session.
	killed.proc.Kill()
	cut.proxy.Stop()
	for _, id := range ids {
		publish(id, 1, 60)
	}
	f.applyPipeline(strings.Replace(convSpec, "allowed_lateness: 1h", "allowed_lateness: 2h", 1))
	f.deploy(&runnelv1.DeploymentSpec{Name: "conv", Selector: "site in (north,south)", Pipelines: []*runnelv1.PipelineRef{{Name: "conv"}},
		Strategy: &runnelv1.Strategy{Staged: true, Canary: 1, BatchPercent: 100, SoakMs: 300}})
	// The canary (c1, the first target by id) passes; the second step
	// waits for c2 and c3.
	f.waitRunning(30*time.Second, map[string]uint32{"conv": 2}, "c1", "c4")
	f.waitUntil(20*time.Second, "the rollout at its second step", func() (bool, string) {
		d, err := f.deployment("conv")
		if err != nil {
			return false, err.Error()
		}
		return d.Version == 2 && d.Rollout.GetStep() == 1 && d.Rollout.GetPhase() == "progressing", d.Rollout.String()
	})

	// The cut edge rebooted with the hub unreachable runs its last
	// applied set, and counts into its outbox.
	cut.proc.Kill()
	cut.proc.Start(t)
	f.waitUntil(20*time.Second, "c3 running revision 1 with its hub unreachable", func() (bool, string) {
		m := scrape(cut.http)
		rev, ok := m[`runnel_edge_pipeline_revision{edge="c3",pipeline="conv"}`]
		up := m[`runnel_edge_uplink_connected{edge="c3"}`]
		return ok && rev == 1 && up == 0, fmt.Sprintf("revision %v (exported %v), uplink connected %v", rev, ok, up)
	})
	publish("c3", 2, 60)
	f.waitUntil(20*time.Second, "c3's offline results in its outbox", func() (bool, string) {
		d, _ := cut.metric(`runnel_edge_outbox_depth{edge="c3"}`)
		in, _ := cut.metric(`runnel_edge_records_in_total{edge="c3",pipeline="conv"}`)
		return d > 0 && in >= 60, fmt.Sprintf("outbox depth %v, records in %v", d, in)
	})

	// The hub dies mid-rollout and comes back where it was.
	f.killHub()
	f.waitUntil(20*time.Second, "the rollout resumed at its second step", func() (bool, string) {
		d, err := f.deployment("conv")
		if err != nil {
			return false, err.Error()
		}
		return d.Version == 2 && d.Rollout.GetStep() == 1 && d.Rollout.GetPhase() == "progressing", d.Rollout.String()
	})

	// The edges come back.
	killed.proc.Start(t)
	if err := cut.proxy.Start(); err != nil {
		t.Fatal(err)
	}
	f.waitUntil(60*time.Second, "c3's outbox drained to the hub", func() (bool, string) {
		d, ok := cut.metric(`runnel_edge_outbox_depth{edge="c3"}`)
		return ok && d == 0, fmt.Sprintf("outbox depth %v", d)
	})
	f.waitRollout(60*time.Second, "conv", 2, "succeeded")
	f.waitRunning(30*time.Second, map[string]uint32{"conv": 2}, ids...)
	for _, id := range ids {
		if rev, _ := edges[id].metric(fmt.Sprintf(`runnel_edge_pipeline_revision{edge=%q,pipeline="conv"}`, id)); rev != 2 {
			t.Errorf("%s's /metrics: revision %v, want 2", id, rev)
		}
	}

	// Readings under revision 2 everywhere, then one far ahead per edge
	// moves every watermark past every window (its own window is left
	// out below).
	for _, id := range ids {
		publish(id, 3, 60)
	}
	for _, id := range ids {
		pubs[id].MustPublish("conv/flush/r", fmt.Appendf(nil, `{"sensor":"%s-f","seq":0,"ts":%d,"v":0}`, id, base+120_000), 1)
	}
	var got []*runnelv1.Result
	f.waitUntil(60*time.Second, "the hub's results equal the oracle", func() (bool, string) {
		rs, err := f.classResults("conv", 0)
		if err != nil {
			return false, err.Error()
		}
		got = rs
		have := map[string]agg{}
		for _, r := range rs {
			if line := r.Key.Fields["line"].GetStringValue(); line != "flush" {
				v := r.Values.Fields
				have[fmt.Sprintf("%s/%d", line, r.WindowStart)] = agg{int64(v["n"].GetNumberValue()), int64(v["sum"].GetNumberValue())}
			}
		}
		return ctlDiff(have, want)
	})
	// Merged: across the edges, and across the two revisions of one
	// class. Windows of phase 0 ending 3 s or more before its last
	// readings fired under revision 1 at every edge; those of phase 3
	// under revision 2 only. In between, an edge may have fired a
	// window under either.
	var both int
	for _, r := range got {
		line := r.Key.Fields["line"].GetStringValue()
		if line == "flush" {
			continue
		}
		if len(r.Revisions) == 2 {
			both++
		}
		switch {
		case !slices.Equal(r.Revisions, []uint32{1}) && !slices.Equal(r.Revisions, []uint32{2}) && !slices.Equal(r.Revisions, []uint32{1, 2}):
			t.Errorf("%s/%d: revisions %v", line, r.WindowStart, r.Revisions)
		case r.WindowStart >= base && r.WindowEnd <= base+3000 && (r.Edges != 4 || !slices.Equal(r.Revisions, []uint32{1})):
			t.Errorf("%s/%d of phase 0: %d edges, revisions %v; want 4 edges, revision 1", line, r.WindowStart, r.Edges, r.Revisions)
		case r.WindowStart >= base+3*phaseLen && (r.Edges != 4 || !slices.Equal(r.Revisions, []uint32{2})):
			t.Errorf("%s/%d of phase 3: %d edges, revisions %v; want 4 edges, revision 2", line, r.WindowStart, r.Edges, r.Revisions)
		}
	}
	t.Logf("%d windows merged from 4 edges; %d hold partials of both revisions", len(want), both)
}

// ctlDiff says how got differs from want (at most 10 lines).
func ctlDiff[V comparable](got, want map[string]V) (bool, string) {
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok || g != want[k] {
			bad = append(bad, fmt.Sprintf("%s: got %v (present %v), want %v", k, g, ok, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			bad = append(bad, fmt.Sprintf("%s: unexpected %v", k, got[k]))
		}
	}
	if len(bad) > 10 {
		bad = append(bad[:10], fmt.Sprintf("... %d more", len(bad)-10))
	}
	return len(bad) == 0, fmt.Sprintf("%d windows, want %d:\n%s", len(got), len(want), strings.Join(bad, "\n"))
}

// eoSpec is the pipeline of TestFleetChangeExactlyOnce (NAME: the
// subtest's).
const eoSpec = `name: NAME
source: {mqtt: {topic: "NAME/#", qos: 1}}
event_time: {field: ts}
event_id: [dev, seq]
key: [dev]
watermark: {max_out_of_order: 300ms}
window: {tumbling: 1s}
allowed_lateness: 500ms
aggregates: {n: count()}
`

// eoReading is one reading of the exactly-once stream; a duplicate
// repeats an earlier one whole (same event id, same time).
type eoReading struct {
	dev string
	seq int
	ts  int64
}

// eoStream is n readings of edge's keys, 10 ms apart in event time and
// up to 250 ms out of order, with one in 20 followed by a duplicate of
// one of the last few.
func eoStream(rng *rand.Rand, edge string, base int64, n int) []eoReading {
	var rs []eoReading
	for i := range n {
		rs = append(rs, eoReading{dev: fmt.Sprintf("%s-d%d", edge, rng.IntN(3)), seq: i, ts: base + int64(i)*10 - rng.Int64N(250)})
		if rng.IntN(20) == 0 {
			rs = append(rs, rs[len(rs)-1-rng.IntN(min(5, len(rs)))])
		}
	}
	return rs
}

// eoOracle is the count of the latest emission of every window
// ("dev/start") over rs and the end of input, a duplicate of a reading
// of rs dropped (each revision's runtime remembers the event ids it
// read, and a revision that starts empty starts with none).
func eoOracle(rs []eoReading, size int64) map[string]int64 {
	seen := map[string]bool{}
	var evs []oracle.Event
	for _, r := range rs {
		id := fmt.Sprintf("%s/%d", r.dev, r.seq)
		if seen[id] {
			continue
		}
		seen[id] = true
		evs = append(evs, oracle.Event{Key: r.dev, Time: r.ts})
	}
	ems, _ := oracle.Run(evs, oracle.Config{Kind: oracle.Tumbling, Size: size, Slide: size, MaxOutOfOrder: 300, Lateness: 500})
	out := map[string]int64{}
	for _, e := range ems {
		out[fmt.Sprintf("%s/%d", e.Key, e.Start)] = int64(len(e.Members))
	}
	return out
}

// TestFleetChangeExactlyOnce: two edges, each with its own keys and
// broker, read a known random stream (out of order, with duplicates by
// event id) while revision 1 → 2 of a pipeline is deployed in the middle
// of it: the deployment comes once each edge has read the first half,
// and the last quarter is published once each edge reports revision 2.
// A reading far ahead per edge then fires every window. The hub's
// results, per compatibility class and per edge, equal the oracle split
// where that edge switched: compatible, the class's latest results are
// the oracle over the whole stream; incompatible, revision 1's class is
// the oracle over the first k readings with the end of input (its open
// windows fired at the switch) and revision 2's the oracle over the
// rest, for some k between the two publishing points. No result of a
// class names a revision of another.
func TestFleetChangeExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("control plane end to end: real processes")
	}
	ids := []string{"x1", "x2"}
	f := newCtlFleet(t, ids...)
	edges := map[string]*ctlEdge{}
	for _, id := range ids {
		edges[id] = f.addEdge(id, testbroker.Start(t), false, "role=eo")
	}
	f.waitRegistered(30*time.Second, ids...)

	for i, c := range []struct {
		name, pipe string
		rev2       func(string) string
		compatible bool
	}{
		{"compatible", "eoc", func(s string) string { return s + "filter: \"ts > 0\"\n" }, true},
		{"incompatible", "eoi", func(s string) string { return strings.Replace(s, "tumbling: 1s", "tumbling: 2s", 1) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := f.with(t)
			spec1 := strings.ReplaceAll(eoSpec, "NAME", c.pipe)
			r1 := f.applyPipeline(spec1)
			dep := &runnelv1.DeploymentSpec{Name: c.pipe, Selector: "role=eo", Pipelines: []*runnelv1.PipelineRef{{Name: c.pipe, Revision: r1.Revision}}}
			f.deploy(dep)
			f.waitRunning(30*time.Second, map[string]uint32{c.pipe: r1.Revision}, ids...)

			base := time.Now().Add(-5*time.Minute).UnixMilli() / 1000 * 1000
			rng := rand.New(rand.NewPCG(uint64(i), 77))
			streams := map[string][]eoReading{}
			pubs := map[string]*testbroker.Publisher{}
			for _, id := range ids {
				streams[id] = eoStream(rng, id, base, 800)
				pubs[id] = ctlPublisher(t, edges[id].broker)
			}
			// publish sends each edge's stream up to end(its length), one
			// goroutine per edge, pace apart; wait waits for them.
			sent := map[string]int{}
			publish := func(end func(n int) int, pace time.Duration) (wait func()) {
				t.Helper()
				done := make(chan struct{})
				to := map[string]int{}
				for _, id := range ids {
					to[id] = end(len(streams[id]))
				}
				for _, id := range ids {
					go func(rs []eoReading, from, to int) {
						defer func() { done <- struct{}{} }()
						for _, r := range rs[from:to] {
							ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
							err := pubs[id].Publish(ctx, c.pipe+"/"+id, fmt.Appendf(nil, `{"dev":%q,"seq":%d,"ts":%d}`, r.dev, r.seq, r.ts), 1)
							cancel()
							if err != nil {
								t.Error(err)
								return
							}
							time.Sleep(pace)
						}
					}(streams[id], sent[id], to[id])
				}
				return func() {
					for range ids {
						<-done
					}
					maps.Copy(sent, to)
				}
			}
			publishTo := func(end func(n int) int) { publish(end, 0)() }
			publishTo(func(n int) int { return n / 2 })
			lo := map[string]int{}
			for _, id := range ids {
				lo[id] = sent[id]
				name := fmt.Sprintf(`runnel_edge_records_in_total{edge=%q,pipeline=%q}`, id, c.pipe)
				f.waitUntil(20*time.Second, id+" read the first half", func() (bool, string) {
					v, _ := edges[id].metric(name)
					return int(v) >= lo[id], fmt.Sprintf("%v of %d", v, lo[id])
				})
			}
			r2 := f.applyPipeline(c.rev2(spec1))
			if (r2.CompatClass == r1.CompatClass) != c.compatible {
				t.Fatalf("revision %d: compat class %d, revision %d's %d", r2.Revision, r2.CompatClass, r1.Revision, r1.CompatClass)
			}
			dep.Pipelines[0].Revision = r2.Revision
			// The third quarter flows while the change is deployed.
			wait := publish(func(n int) int { return n * 3 / 4 }, 2*time.Millisecond)
			f.deploy(dep)
			wait()
			f.waitRunning(30*time.Second, map[string]uint32{c.pipe: r2.Revision}, ids...)
			hi := map[string]int{}
			for _, id := range ids {
				hi[id] = sent[id]
			}
			publishTo(func(n int) int { return n })
			flush := base + 120_000
			for _, id := range ids {
				pubs[id].MustPublish(c.pipe+"/"+id, fmt.Appendf(nil, `{"dev":"%s-flush","seq":0,"ts":%d}`, id, flush), 1)
			}

			// Wait for the results to settle (every outbox acked, two
			// reads alike), then judge; judge again while they change.
			byEdge := func(rs []*runnelv1.Result, id string) map[string]int64 {
				out := map[string]int64{}
				for _, r := range rs {
					dev := r.Key.Fields["dev"].GetStringValue()
					if strings.HasPrefix(dev, id+"-") && dev != id+"-flush" {
						out[fmt.Sprintf("%s/%d", dev, r.WindowStart)] = int64(r.Values.Fields["n"].GetNumberValue())
					}
				}
				return out
			}
			var prev, verdict string
			judged := false
			split := map[string]int{}
			f.waitUntil(60*time.Second, "the hub's results by class equal the oracle split at each edge's switch", func() (bool, string) {
				for _, id := range ids {
					if d, ok := edges[id].metric(fmt.Sprintf(`runnel_edge_outbox_depth{edge=%q}`, id)); !ok || d != 0 {
						return false, fmt.Sprintf("%s: outbox depth %v", id, d)
					}
				}
				c1, err := f.classResults(c.pipe, r1.Revision)
				if err != nil {
					return false, err.Error()
				}
				c2 := c1
				if !c.compatible {
					if c2, err = f.classResults(c.pipe, r2.Revision); err != nil {
						return false, err.Error()
					}
				}
				if fp := ctlFingerprint(c1) + ctlFingerprint(c2); fp != prev {
					prev, judged = fp, false
					return false, "results still changing"
				}
				if judged {
					return false, verdict
				}
				judged = true
				verdict = ctlJudgeRevisions(c.compatible, c1, c2, r1.Revision, r2.Revision)
				for _, id := range ids {
					if c.compatible {
						if ok, why := ctlDiff(byEdge(c1, id), eoOracle(streams[id], 1000)); !ok {
							verdict += id + ": " + why + "\n"
						}
						continue
					}
					got1, got2 := byEdge(c1, id), byEdge(c2, id)
					split[id] = -1
					for k := lo[id]; k <= hi[id] && split[id] < 0; k++ {
						if ok, _ := ctlDiff(got1, eoOracle(streams[id][:k], 1000)); !ok {
							continue
						}
						if ok, _ := ctlDiff(got2, eoOracle(streams[id][k:], 2000)); ok {
							split[id] = k
						}
					}
					if split[id] < 0 {
						verdict += fmt.Sprintf("%s: no split of its %d readings in [%d, %d] gives revision %d's %d windows and revision %d's %d\n",
							id, len(streams[id]), lo[id], hi[id], r1.Revision, len(got1), r2.Revision, len(got2))
					}
				}
				return verdict == "", verdict
			})
			for _, id := range ids {
				if c.compatible {
					t.Logf("%s: %d readings, %d windows, one class", id, len(streams[id]), len(byEdge(ctlMustResults(f, c.pipe, r1.Revision), id)))
				} else {
					t.Logf("%s: switched after reading %d of %d (deployed after %d, reported by %d)", id, split[id], len(streams[id]), lo[id], hi[id])
				}
			}
		})
	}
}

// ctlFingerprint is what results hold, to tell whether they changed.
func ctlFingerprint(rs []*runnelv1.Result) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%v/%d/%d/%v/%v", r.Key.AsMap(), r.WindowStart, r.Version, r.Values.AsMap(), r.Revisions))
	}
	sort.Strings(s)
	return strings.Join(s, ";")
}

func ctlMustResults(f *ctlFleet, pipe string, rev uint32) []*runnelv1.Result {
	rs, err := f.classResults(pipe, rev)
	if err != nil {
		f.t.Fatal(err)
	}
	return rs
}

// ctlJudgeRevisions checks the revisions the results name: one class with
// both revisions when compatible (some results of each); else each
// class only its own revision.
func ctlJudgeRevisions(compatible bool, c1, c2 []*runnelv1.Result, rev1, rev2 uint32) string {
	var bad []string
	seen := map[uint32]bool{}
	for _, r := range c1 {
		for _, v := range r.Revisions {
			seen[v] = true
		}
		allowed := []uint32{rev1}
		if compatible {
			allowed = append(allowed, rev2)
		}
		for _, v := range r.Revisions {
			if !slices.Contains(allowed, v) {
				bad = append(bad, fmt.Sprintf("class of revision %d: window %v/%d names revisions %v", rev1, r.Key.AsMap(), r.WindowStart, r.Revisions))
			}
		}
	}
	if compatible && (!seen[rev1] || !seen[rev2]) {
		bad = append(bad, fmt.Sprintf("the class's results name revisions %v, want both %d and %d", seen, rev1, rev2))
	}
	if !compatible {
		for _, r := range c2 {
			if !slices.Equal(r.Revisions, []uint32{rev2}) {
				bad = append(bad, fmt.Sprintf("class of revision %d: window %v/%d names revisions %v", rev2, r.Key.AsMap(), r.WindowStart, r.Revisions))
			}
		}
	}
	if len(bad) > 5 {
		bad = append(bad[:5], fmt.Sprintf("... %d more", len(bad)-5))
	}
	if len(bad) == 0 {
		return ""
	}
	return strings.Join(bad, "\n") + "\n"
}

// ctlRollSpec is revision rev of TestFleetHubKilledMidRollout's pipeline
// (each a compatible change of the allowed lateness).
func ctlRollSpec(rev int) string {
	return fmt.Sprintf(`name: roll
source: {mqtt: {topic: "roll/#", qos: 1}}
event_time: {field: ts}
key: [dev]
window: {tumbling: 1s}
allowed_lateness: %ds
aggregates: {n: count()}
`, rev)
}

// TestFleetHubKilledMidRollout: a staged rollout (canary 1, then
// batches of 2, small soak) across the 5 of 6 edges a selector picks,
// while another deployment runs on the sixth. A reference rollout of
// revision 1 → 2 runs without kills; then one of 2 → 3 during which the
// hub is killed with SIGKILL at random moments (seeded; the seed is
// logged, RUNNEL_E2E_SEED reruns it) and restarted, up to 3 times. It
// ends in the same state as the reference: succeeded at its last step,
// every target on the new revision, each given one new desired set, the
// sixth edge untouched.
func TestFleetHubKilledMidRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("control plane end to end: real processes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RUNNEL_E2E_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("RUNNEL_E2E_SEED: %v", err)
		}
	}
	t.Logf("seed %d (RUNNEL_E2E_SEED=%d reruns it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 3))

	ids := []string{"g0", "g1", "g2", "g3", "g4", "g5"}
	prod := ids[:5]
	f := newCtlFleet(t, ids...)
	mosq := testbroker.Start(t) // no readings: the edges only need a broker
	for i, id := range ids {
		tier := "prod"
		if id == "g5" {
			tier = "lab"
		}
		f.addEdge(id, mosq, false, "tier="+tier, "hw="+[]string{"rpi4", "cm4"}[i%2])
	}
	f.waitRegistered(30*time.Second, ids...)
	f.applyPipeline(ctlRollSpec(1))
	f.applyPipeline(strings.ReplaceAll(ctlRollSpec(1), "roll", "lab"))
	f.deploy(&runnelv1.DeploymentSpec{Name: "roll", Selector: "tier=prod", Pipelines: []*runnelv1.PipelineRef{{Name: "roll"}}})
	f.deploy(&runnelv1.DeploymentSpec{Name: "lab", Selector: "tier=lab", Pipelines: []*runnelv1.PipelineRef{{Name: "lab"}}})
	f.waitRollout(30*time.Second, "roll", 1, "succeeded")
	f.waitRollout(30*time.Second, "lab", 1, "succeeded")
	f.waitRunning(30*time.Second, map[string]uint32{"roll": 1}, prod...)
	f.waitRunning(30*time.Second, map[string]uint32{"lab": 1}, "g5")

	staged := &runnelv1.Strategy{Staged: true, Canary: 1, Batch: 2, SoakMs: 400}
	rollout := func(rev uint32, kill bool) string {
		gens := f.generations(ids)
		f.applyPipeline(ctlRollSpec(int(rev)))
		d := f.deploy(&runnelv1.DeploymentSpec{Name: "roll", Selector: "tier=prod", Pipelines: []*runnelv1.PipelineRef{{Name: "roll"}}, Strategy: staged})
		start := time.Now()
		for kills := 0; kill && kills < 3; kills++ {
			time.Sleep(time.Duration(rng.Int64N(int64(800 * time.Millisecond)))) // a random moment, not a condition
			cur, err := f.deployment("roll")
			if err != nil {
				t.Fatal(err)
			}
			if cur.Rollout.GetPhase() != "progressing" {
				t.Logf("rollout %s after %d kills", cur.Rollout.GetPhase(), kills)
				break
			}
			f.killHub()
			t.Logf("hub killed %.1fs into the rollout, at step %d of %d", time.Since(start).Seconds(), cur.Rollout.GetStep(), cur.Rollout.GetSteps())
			// It resumes where it was: never an earlier step.
			after, err := f.deployment("roll")
			if err != nil {
				t.Fatal(err)
			}
			if ph := after.Rollout.GetPhase(); after.Version != d.Version || after.Rollout.GetStep() < cur.Rollout.GetStep() ||
				(ph != "progressing" && ph != "succeeded") {
				t.Errorf("after the restart: version %d, %v; before it: step %d", after.Version, after.Rollout, cur.Rollout.GetStep())
			}
		}
		f.waitRollout(90*time.Second, "roll", d.Version, "succeeded")
		f.waitRunning(30*time.Second, map[string]uint32{"roll": rev}, prod...)
		t.Logf("rollout of revision %d: %.1fs", rev, time.Since(start).Seconds())
		return f.outcome("roll", rev, gens)
	}
	ref := rollout(2, false)
	got := rollout(3, true)
	if got != ref {
		t.Errorf("the rollout with hub kills ended as\n%s\nwithout kills:\n%s", got, ref)
	}
	t.Logf("final state:\n%s", got)
}

// generations returns each edge's desired generation.
func (f *ctlFleet) generations(ids []string) map[string]uint64 {
	f.t.Helper()
	g := map[string]uint64{}
	for _, id := range ids {
		fe, err := f.fleet.GetFleetEdge(f.ctx(), &runnelv1.GetFleetEdgeRequest{EdgeId: id})
		if err != nil {
			f.t.Fatal(err)
		}
		g[id] = fe.DesiredGeneration
	}
	return g
}

// outcome renders where a rollout of deployment dep to revision rev of
// pipeline roll ended, in terms that do not depend on which revision it
// was: rev is "new", rev-1 "old"; each edge's generation as its change
// since gens.
func (f *ctlFleet) outcome(dep string, rev uint32, gens map[string]uint64) string {
	f.t.Helper()
	d, err := f.deployment(dep)
	if err != nil {
		f.t.Fatal(err)
	}
	vs, err := f.fleet.ListDeploymentVersions(f.ctx(), &runnelv1.GetDeploymentRequest{Name: dep})
	if err != nil {
		f.t.Fatal(err)
	}
	name := func(p string, r uint32) string {
		switch {
		case p == "roll" && r == rev:
			return p + "@new"
		case p == "roll" && r == rev-1:
			return p + "@old"
		}
		return fmt.Sprintf("%s@%d", p, r)
	}
	r := d.Rollout
	var b strings.Builder
	fmt.Fprintf(&b, "deployment %s: the latest of its versions (%v), resolved %v; phase %s, step %d of %d; targeted %d, applied %d, pending %d, failed %d; rolled back %v, failed edges %v\n",
		dep, d.Version == uint32(len(vs.Deployments)), name(d.Resolved[0].Name, d.Resolved[0].Revision), r.Phase, r.Step, r.Steps,
		r.Targeted, r.Applied, r.Pending, r.Failed, r.RolledBack, r.FailedEdges)
	for _, id := range slices.Sorted(maps.Keys(gens)) {
		fe, err := f.fleet.GetFleetEdge(f.ctx(), &runnelv1.GetFleetEdgeRequest{EdgeId: id})
		if err != nil {
			f.t.Fatal(err)
		}
		var desired, running []string
		for _, p := range fe.Desired {
			desired = append(desired, name(p.Name, p.Revision))
		}
		for _, p := range fe.GetStatus().GetPipelines() {
			running = append(running, name(p.Name, p.Revision)+" "+p.State)
		}
		sort.Strings(desired)
		sort.Strings(running)
		fmt.Fprintf(&b, "%s: desired %v, generation +%d, applied %v, reported %v, apply error %q\n", id, desired,
			fe.DesiredGeneration-gens[id], fe.GetStatus().GetAppliedGeneration() == fe.DesiredGeneration, running, fe.GetStatus().GetApplyError())
	}
	return b.String()
}

// ctlRefSpec is TestFleetRefusalsE2E's deployed pipeline; ctlBadSpec has three
// problems, on lines 5, 6 and 7.
const (
	ctlRefSpec = `name: ref
source: {mqtt: {topic: "ref/#", qos: 1}}
event_time: {field: ts}
key: [dev]
window: {tumbling: 1s}
aggregates: {n: count()}
`
	ctlBadSpec = `name: bad
source: {mqtt: {topic: "bad/#", qos: 1}}
event_time: {field: ts}
key: [dev]
window: {tumbling: nope}
aggregates: {n: cnt()}
bogus: 1
`
)

// TestFleetRefusalsE2E: through the real hub, every refusal answers the
// documented code with a message that names the problem, and changes
// nothing (the Fleet API's whole state is read back after each): a spec
// with errors (every problem, file:line:col, in the message and the
// SpecProblems detail; as a new pipeline, a new revision or a dry run), a
// selector that does not parse, a delete of a deployed pipeline; a
// viewer token's changes; an operator token's token management; an edge
// token on the Fleet and Results APIs, and on the control stream under
// another edge's id; an unknown token.
func TestFleetRefusalsE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("control plane end to end: real processes")
	}
	f := newCtlFleet(t, "r1", "r2")
	f.addEdge("r1", testbroker.Start(t), false, "site=plant-7", "hw=rpi4")
	f.waitRegistered(30*time.Second, "r1")
	f.applyPipeline(ctlRefSpec)
	f.deploy(&runnelv1.DeploymentSpec{Name: "ref", Selector: "site=plant-7", Pipelines: []*runnelv1.PipelineRef{{Name: "ref"}}})
	f.waitRollout(30*time.Second, "ref", 1, "succeeded")
	f.waitRunning(30*time.Second, map[string]uint32{"ref": 1}, "r1")

	before := f.fleetState()
	refused := func(what string, err error, code codes.Code, says ...string) {
		t.Helper()
		if status.Code(err) != code {
			t.Errorf("%s: %v, want %v", what, err, code)
		}
		for _, s := range says {
			if !strings.Contains(status.Convert(err).Message(), s) {
				t.Errorf("%s: %q does not say %q", what, status.Convert(err).Message(), s)
			}
		}
		if after := f.fleetState(); after != before {
			t.Errorf("%s changed the fleet's state:\n%s", what, ctlLineDiff(before, after))
			before = after // one report per change
		}
	}
	ctx := f.ctx()

	// Bad specs, each problem at its place.
	for _, c := range []struct {
		what string
		req  *runnelv1.ApplyPipelineRequest
	}{
		{"a new pipeline with errors", &runnelv1.ApplyPipelineRequest{Spec: ctlBadSpec, File: "bad.yaml"}},
		{"a dry run with errors", &runnelv1.ApplyPipelineRequest{Spec: ctlBadSpec, File: "bad.yaml", DryRun: true}},
		{"a revision with errors", &runnelv1.ApplyPipelineRequest{Spec: strings.ReplaceAll(ctlBadSpec, "name: bad", "name: ref"), File: "bad.yaml"}},
	} {
		_, err := f.fleet.ApplyPipeline(ctx, c.req)
		refused(c.what, err, codes.InvalidArgument, "bad.yaml:5:", "bad.yaml:6:", "bad.yaml:7:", "window", "cnt", "bogus")
		var lines []uint32
		for _, d := range status.Convert(err).Details() {
			if sp, ok := d.(*runnelv1.SpecProblems); ok {
				for _, p := range sp.Problems {
					lines = append(lines, p.Line)
					if p.File != "bad.yaml" || p.Column == 0 || p.Message == "" {
						t.Errorf("%s: problem %v", c.what, p)
					}
					if pos := fmt.Sprintf("bad.yaml:%d:%d:", p.Line, p.Column); !strings.Contains(status.Convert(err).Message(), pos) {
						t.Errorf("%s: the message does not list the detail's %s", c.what, pos)
					}
				}
			}
		}
		if !slices.Equal(lines, []uint32{5, 6, 7}) {
			t.Errorf("%s: SpecProblems on lines %v, want 5, 6, 7", c.what, lines)
		}
		if c.what == "a new pipeline with errors" {
			t.Logf("refusal of a spec with errors:\n%s", status.Convert(err).Message())
		}
	}
	_, err := f.fleet.GetPipeline(ctx, &runnelv1.GetPipelineRequest{Name: "bad"})
	refused("GetPipeline of the refused spec", err, codes.NotFound)

	// Selectors that do not parse.
	for _, sel := range []string{"site in (a,b", "hw notin rpi4", "!", "site=plant 7", "=x", "site in ()"} {
		_, err := f.fleet.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "ref", Selector: sel,
			Pipelines: []*runnelv1.PipelineRef{{Name: "ref"}}}})
		refused(fmt.Sprintf("a deployment with selector %q", sel), err, codes.InvalidArgument, "selector")
		_, err = f.fleet.ListFleetEdges(ctx, &runnelv1.ListFleetEdgesRequest{Selector: sel})
		refused(fmt.Sprintf("ListFleetEdges %q", sel), err, codes.InvalidArgument, "selector")
	}
	_, err = f.fleet.DeletePipeline(ctx, &runnelv1.DeletePipelineRequest{Name: "ref"})
	refused("deleting a deployed pipeline", err, codes.FailedPrecondition, "ref")

	// A viewer reads and changes nothing; an operator manages no tokens.
	viewer, err := f.fleet.CreateToken(ctx, &runnelv1.CreateTokenRequest{Name: "watcher", Role: "viewer"})
	if err != nil {
		t.Fatal(err)
	}
	operator, err := f.fleet.CreateToken(ctx, &runnelv1.CreateTokenRequest{Name: "deployer", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	before = f.fleetState()
	vc := f.connAs(viewer.Secret)
	vf, vr := runnelv1.NewFleetClient(vc), runnelv1.NewResultsClient(vc)
	if _, err := vf.ListDeployments(ctx, &runnelv1.ListDeploymentsRequest{}); err != nil {
		t.Errorf("a viewer lists deployments: %v", err)
	}
	if _, err := vr.ListPipelines(ctx, &runnelv1.ListPipelinesRequest{}); err != nil {
		t.Errorf("a viewer lists result pipelines: %v", err)
	}
	_, err = vf.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: strings.ReplaceAll(ctlRefSpec, "1s", "2s")})
	refused("a viewer's ApplyPipeline", err, codes.PermissionDenied, "operator")
	_, err = vf.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "ref", Selector: "hw=rpi4",
		Pipelines: []*runnelv1.PipelineRef{{Name: "ref"}}}})
	refused("a viewer's ApplyDeployment", err, codes.PermissionDenied, "operator")
	_, err = vf.Rollout(ctx, &runnelv1.RolloutRequest{Name: "ref", Action: "undo"})
	refused("a viewer's Rollout undo", err, codes.PermissionDenied, "operator")
	_, err = vf.LabelEdge(ctx, &runnelv1.LabelEdgeRequest{EdgeId: "r1", Set: map[string]string{"site": "elsewhere"}})
	refused("a viewer's LabelEdge", err, codes.PermissionDenied, "operator")
	_, err = vf.DeletePipeline(ctx, &runnelv1.DeletePipelineRequest{Name: "ref"})
	refused("a viewer's DeletePipeline", err, codes.PermissionDenied, "operator")
	_, err = vf.CreateToken(ctx, &runnelv1.CreateTokenRequest{Name: "mine", Role: "admin"})
	refused("a viewer's CreateToken", err, codes.PermissionDenied, "admin")
	of := runnelv1.NewFleetClient(f.connAs(operator.Secret))
	_, err = of.CreateToken(ctx, &runnelv1.CreateTokenRequest{Name: "mine", Role: "admin"})
	refused("an operator's CreateToken", err, codes.PermissionDenied, "admin")
	_, err = of.RevokeToken(ctx, &runnelv1.RevokeTokenRequest{Name: "watcher"})
	refused("an operator's RevokeToken", err, codes.PermissionDenied, "admin")

	// An edge token: no Fleet API (not even its own entry), no results,
	// and no control stream under another edge's id.
	ec := f.connAs(f.tokens["r1"])
	ef, er := runnelv1.NewFleetClient(ec), runnelv1.NewResultsClient(ec)
	_, err = ef.ListFleetEdges(ctx, &runnelv1.ListFleetEdgesRequest{})
	refused("an edge token's ListFleetEdges", err, codes.PermissionDenied)
	_, err = ef.GetFleetEdge(ctx, &runnelv1.GetFleetEdgeRequest{EdgeId: "r1"})
	refused("an edge token's GetFleetEdge of itself", err, codes.PermissionDenied)
	_, err = ef.GetFleetEdge(ctx, &runnelv1.GetFleetEdgeRequest{EdgeId: "r2"})
	refused("an edge token's GetFleetEdge of another edge", err, codes.PermissionDenied)
	_, err = ef.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: ctlRefSpec})
	refused("an edge token's ApplyPipeline", err, codes.PermissionDenied)
	_, err = er.QueryResults(ctx, &runnelv1.QueryResultsRequest{Pipeline: "ref"})
	refused("an edge token's QueryResults", err, codes.PermissionDenied)
	_, err = er.ListEdges(ctx, &runnelv1.ListEdgesRequest{})
	refused("an edge token's ListEdges", err, codes.PermissionDenied)
	// The control stream on a connection of its own, as an edge's: ec's
	// first calls were the API's.
	stream, err := runnelv1.NewControlClient(f.connAs(f.tokens["r1"])).Connect(ctx)
	if err == nil {
		err = stream.Send(&runnelv1.ControlRequest{Msg: &runnelv1.ControlRequest_Register{Register: &runnelv1.Register{EdgeId: "r2",
			Labels: map[string]string{"site": "plant-7"}}}})
		if err == nil {
			_, err = stream.Recv()
		} else if _, rerr := stream.Recv(); rerr != nil {
			err = rerr
		}
	}
	refused("r1's token registering as r2", err, codes.PermissionDenied)
	_, err = f.fleet.GetFleetEdge(ctx, &runnelv1.GetFleetEdgeRequest{EdgeId: "r2"})
	refused("GetFleetEdge of r2 after the impersonation", err, codes.NotFound)
	_, err = runnelv1.NewFleetClient(f.connAs("no-such-token-0123456789")).ListDeployments(ctx, &runnelv1.ListDeploymentsRequest{})
	refused("an unknown token", err, codes.Unauthenticated)

	// A dry run of a good spec stores nothing either.
	dry, err := f.fleet.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: strings.ReplaceAll(ctlRefSpec, "1s", "2s"), DryRun: true})
	if err != nil || dry.Created || !strings.Contains(dry.Diff, "2s") {
		t.Errorf("dry run: %v, %v", dry, err)
	}
	refused("a dry run", nil, codes.OK)
}

// fleetState renders everything the Fleet API holds, but for what moves
// on its own (an edge's connection, last contact and status).
func (f *ctlFleet) fleetState() string {
	f.t.Helper()
	ctx := f.ctx()
	var b strings.Builder
	add := func(m proto.Message, err error) {
		if err != nil {
			f.t.Fatal(err)
		}
		b.WriteString(prototext.MarshalOptions{Multiline: true}.Format(m))
		b.WriteString("\n")
	}
	ps, err := f.fleet.ListManagedPipelines(ctx, &runnelv1.ListManagedPipelinesRequest{})
	add(ps, err)
	for _, p := range ps.GetPipelines() {
		add(f.fleet.ListRevisions(ctx, &runnelv1.ListRevisionsRequest{Name: p.Name}))
	}
	ds, err := f.fleet.ListDeployments(ctx, &runnelv1.ListDeploymentsRequest{})
	add(ds, err)
	for _, d := range ds.GetDeployments() {
		add(f.fleet.ListDeploymentVersions(ctx, &runnelv1.GetDeploymentRequest{Name: d.Spec.Name}))
	}
	es, err := f.fleet.ListFleetEdges(ctx, &runnelv1.ListFleetEdgesRequest{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range es.Edges {
		e.LastSeenMs, e.Connected, e.Status = 0, false, nil
	}
	add(es, nil)
	add(f.fleet.ListTokens(ctx, &runnelv1.ListTokensRequest{}))
	add(f.fleet.ListAudit(ctx, &runnelv1.ListAuditRequest{Limit: 1000}))
	return b.String()
}

// ctlLineDiff lists the lines of a and b that the other lacks.
func ctlLineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ia, ib := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !ib[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ia[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}
