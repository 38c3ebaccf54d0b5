package edge

import (
	"cmp"
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/internal/health"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/window"
)

// FleetConfig turns on the edge agent (docs/fleet.md): with an uplink
// configured, the node keeps a control stream to the same hub, registers
// with its labels, runs the pipeline revisions the hub deploys to it
// (managed.go) beside those of its local files, and reports its status.
type FleetConfig struct {
	Labels         map[string]string // the edge's own labels (site=plant-7, hw=rpi4…)
	Version        string            // the binary's version, reported
	StatusInterval time.Duration     // how often status goes to the hub (default 10s)
}

// DefaultStatusInterval is FleetConfig.StatusInterval's default.
const DefaultStatusInterval = 10 * time.Second

// agent is the node's side of the control stream.
type agent struct {
	mu          sync.Mutex
	connected   bool
	since       time.Time // when connected last changed (the node's start before)
	unsupported bool      // the hub answered Unimplemented: it has no fleet API
	lastErr     string
	generation  uint64            // the last desired set applied or refused
	applyErr    string            // why it was refused or partly failed
	failed      map[string]string // pipeline -> error, of the desired set, not running
	applying    *runnelv1.DesiredSet

	// Counters at the last report, for the per-minute rates.
	prevAt               time.Time
	prevIn, prevDead, pL uint64
}

// runAgent keeps the control stream up until ctx ends, reconnecting with
// the uplink's back-off (full jitter).
func (n *node) runAgent(ctx context.Context, u *uplink.Uplink) {
	lo, hi := u.Backoff()
	delay := lo
	for {
		progressed, err := n.agentSession(ctx, u.Conn())
		unsupported := grpcstatus.Code(err) == codes.Unimplemented
		n.agent.mu.Lock()
		if n.agent.connected || n.agent.since.IsZero() {
			n.agent.since = time.Now()
		}
		n.agent.connected = false
		if err != nil {
			n.agent.lastErr = err.Error()
		}
		first := unsupported && !n.agent.unsupported
		n.agent.unsupported = unsupported
		n.agent.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if progressed {
			delay = lo
		}
		if unsupported {
			// An older hub, or one without a fleet store: ask again now
			// and then, in case it is upgraded.
			delay = hi
		}
		wait := time.Duration(rand.Int64N(int64(delay)) + 1)
		switch {
		case first:
			n.lg.Info("edge: the hub has no fleet API; running local pipelines only", "err", err)
		case !unsupported:
			n.lg.Warn("edge: control stream ended; retrying", "err", err, "in", wait.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		delay = min(delay*2, hi)
	}
}

// agentSession runs one control stream: Register, then desired sets in
// and status out. progressed reports whether the hub sent a set.
func (n *node) agentSession(ctx context.Context, conn *grpc.ClientConn) (progressed bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := runnelv1.NewControlClient(conn).Connect(sctx)
	if err != nil {
		return false, err
	}
	fc := n.cfg.Fleet
	reg := &runnelv1.Register{EdgeId: n.cfg.EdgeID, Labels: fc.Labels, Version: fc.Version,
		Os: runtime.GOOS, Arch: runtime.GOARCH, Status: n.edgeStatus(time.Now())}
	if err := stream.Send(&runnelv1.ControlRequest{Msg: &runnelv1.ControlRequest_Register{Register: reg}}); err != nil {
		// The stream's status (Unimplemented, say) comes with Recv.
		if _, rerr := stream.Recv(); rerr != nil {
			err = rerr
		}
		return false, err
	}
	// One goroutine receives; a slow apply sees only the newest set.
	desired := make(chan *runnelv1.DesiredSet, 1)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if d := m.GetDesired(); d != nil {
				select {
				case <-desired:
				default:
				}
				desired <- d
			}
		}
	}()
	defer func() {
		cancel()
		<-recvErr
	}()
	n.agent.mu.Lock()
	n.agent.connected, n.agent.lastErr, n.agent.since = true, "", time.Now()
	n.agent.mu.Unlock()
	interval := cmp.Or(fc.StatusInterval, DefaultStatusInterval)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	send := func() error {
		return stream.Send(&runnelv1.ControlRequest{Msg: &runnelv1.ControlRequest_Status{Status: n.edgeStatus(time.Now())}})
	}
	for {
		select {
		case d := <-desired:
			progressed = true
			n.applyDesired(ctx, d, send)
			if err := send(); err != nil {
				return progressed, err
			}
		case <-tick.C:
			if err := send(); err != nil {
				return progressed, err
			}
		case err := <-recvErr:
			recvErr <- err // for the deferred wait
			return progressed, err
		case <-ctx.Done():
			return progressed, nil
		}
	}
}

// applyDesired validates and compiles a desired set and has the pump switch
// to it; a set that does not compile, or names a local pipeline, is
// refused with every problem, and the node runs on what it had. sendStatus
// reports "applying" before a switch.
func (n *node) applyDesired(ctx context.Context, d *runnelv1.DesiredSet, sendStatus func() error) {
	a := &n.agent
	if cur := n.fleet.applied.Load(); cur != nil && sameSet(cur, d) {
		a.mu.Lock()
		a.generation, a.applyErr, a.failed = d.GetGeneration(), "", nil
		a.mu.Unlock()
		if cur.GetGeneration() != d.GetGeneration() {
			// Same pipelines under a new generation: nothing to switch,
			// but what the state file holds follows.
			_ = n.apply(ctx, d, mustCompile(d))
		}
		return
	}
	defs, problems := compileSet(d)
	problems = append(problems, conflictsWithLocal(n.cfg.Pipelines, defs)...)
	if len(problems) > 0 {
		msgs := make([]string, len(problems))
		failed := map[string]string{}
		for i, p := range problems {
			msgs[i] = p.Error()
			failed[p.name] = strings.TrimSpace(failed[p.name] + "\n" + msgs[i])
		}
		a.mu.Lock()
		a.generation, a.applyErr, a.failed = d.GetGeneration(), strings.Join(msgs, "\n"), failed
		a.mu.Unlock()
		n.lg.Error("edge: refused the hub's pipeline set; running what it had", "generation", d.GetGeneration(), "problems", strings.Join(msgs, "; "))
		return
	}
	a.mu.Lock()
	a.applying = d
	a.mu.Unlock()
	_ = sendStatus()
	err := n.apply(ctx, d, defs)
	a.mu.Lock()
	a.applying = nil
	a.generation, a.applyErr, a.failed = d.GetGeneration(), "", nil
	if err != nil {
		a.applyErr = err.Error()
	}
	a.mu.Unlock()
	if err != nil {
		n.lg.Error("edge: applying the hub's pipeline set", "generation", d.GetGeneration(), "err", err)
		return
	}
	n.lg.Info("edge: running the hub's pipeline set", "generation", d.GetGeneration(), "pipelines", len(defs))
}

// mustCompile compiles a set known to compile (it runs).
func mustCompile(d *runnelv1.DesiredSet) []pipeDef {
	defs, _ := compileSet(d)
	return defs
}

// sameSet reports whether two sets hold the same revisions.
func sameSet(a, b *runnelv1.DesiredSet) bool {
	return slices.EqualFunc(a.GetPipelines(), b.GetPipelines(), func(x, y *runnelv1.DesiredPipeline) bool {
		return x.GetName() == y.GetName() && x.GetRevision() == y.GetRevision() && x.GetHash() == y.GetHash()
	})
}

// edgeStatus is the node's report for the hub.
func (n *node) edgeStatus(now time.Time) *runnelv1.EdgeStatus {
	a := &n.agent
	a.mu.Lock()
	defer a.mu.Unlock()
	st := &runnelv1.EdgeStatus{AtMs: now.UnixMilli(), AppliedGeneration: a.generation, ApplyError: a.applyErr,
		DiskUsedBytes: n.diskUsed(), DiskCapBytes: n.cfg.DiskCap}
	if a.generation == 0 {
		if set := n.fleet.applied.Load(); set != nil {
			st.AppliedGeneration = set.GetGeneration()
		}
		if len(n.fleet.startProblems) > 0 {
			st.ApplyError = strings.Join(n.fleet.startProblems, "\n")
		}
	}
	// One entry per pipeline: the revision running (0: none), and its
	// state: running, applying (a switch is under way), or failed (the
	// desired revision was refused; the revision shown still runs, if any).
	var in, dead, late uint64
	byName := map[string]*runnelv1.PipelineStatus{}
	for _, ps := range *n.pipeView.Load() {
		s := ps.rt.Stats()
		in, dead, late = in+s.In, dead+s.Dead, late+s.Late
		e := &runnelv1.PipelineStatus{Name: ps.p.Name, Revision: ps.def.rev, State: "running"}
		if wm := ps.rt.Watermark(); wm != window.MinTime {
			e.WatermarkMs, e.WatermarkLagMs = wm, max(0, now.UnixMilli()-wm)
		}
		st.Pipelines = append(st.Pipelines, e)
		byName[e.Name] = e
	}
	entry := func(name string) *runnelv1.PipelineStatus {
		if e := byName[name]; e != nil {
			return e
		}
		e := &runnelv1.PipelineStatus{Name: name}
		st.Pipelines = append(st.Pipelines, e)
		byName[name] = e
		return e
	}
	if a.applying != nil {
		for _, dp := range a.applying.GetPipelines() {
			entry(dp.GetName()).State = "applying"
		}
	}
	for name, why := range a.failed {
		e := entry(name)
		e.State, e.Error = "failed", why
	}
	if next, acked := n.lastSeq.Load(), n.uplinkAck.Load(); next > acked+1 {
		st.OutboxEntries = next - 1 - acked
		at, ok := n.unsent.oldest(acked + 1)
		if !ok {
			at = n.started.UnixMilli() // committed before this start
		}
		st.OldestUnsentMs = max(0, now.UnixMilli()-at)
	}
	if !a.prevAt.IsZero() {
		if el := now.Sub(a.prevAt).Minutes(); el > 0 {
			rate := func(cur, prev uint64) float64 {
				if cur < prev { // a pipeline was replaced: its counters restarted
					return float64(cur) / el
				}
				return float64(cur-prev) / el
			}
			st.RecordsPerMin, st.DeadPerMin, st.LatePerMin = rate(in, a.prevIn), rate(dead, a.prevDead), rate(late, a.pL)
		}
	}
	a.prevAt, a.prevIn, a.prevDead, a.pL = now, in, dead, late
	return st
}

// controlAwayAfter: the control stream down this long is degraded.
const controlAwayAfter = time.Minute

// agentCheck is the "fleet" health check (health.go): failing while the
// hub's last set was refused (the edge runs an older one), degraded while
// the control stream has been down a minute.
func (n *node) agentCheck(now time.Time, add func(string, health.Status, string, ...any)) {
	a := &n.agent
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.applyErr != "":
		add("fleet", health.Failing, "the hub's pipeline set (generation %d) failed; running what was applied before: %s", a.generation, a.applyErr)
	case a.unsupported:
		add("fleet", health.OK, "the hub has no fleet API: local pipelines only")
	case !a.connected && now.Sub(a.since) > controlAwayAfter:
		add("fleet", health.Degraded, "control stream to the hub down since %s: %s", a.since.UTC().Format(time.RFC3339), a.lastErr)
	default:
		add("fleet", health.OK, "")
	}
}
