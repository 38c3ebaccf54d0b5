package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/hub/fleet"
	"github.com/runnel-io/runnel/hub/server"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
)

// Options configure a demo run. Zero fields take defaults.
type Options struct {
	Edges    int           // simulated gateways (default 3)
	Duration time.Duration // stop after this long; 0: until ctx ends
	// Offline is when the last edge loses its uplink (the hub and its
	// control stream), and for how long (defaults 20s and 15s);
	// OfflineFor < 0 keeps every edge online.
	OfflineAt, OfflineFor time.Duration
	// Deploy is when revision 1 is deployed to every edge, Rollout when
	// revision 2 rolls out with a canary (defaults 2s and 24s), Soak how
	// long each step of it must stay healthy (default 6s).
	Deploy, Rollout, Soak time.Duration
	GRPCAddr, HTTPAddr    string    // hub listeners (default 127.0.0.1:7443 / :7080, or free ports when taken)
	Out                   io.Writer // the results (default os.Stdout)
	Logger                *slog.Logger
}

// AdminToken is the demo hub's API token (role admin): runnelctl uses it.
const AdminToken = "demo-admin-token"

// Revision1 is the demo's pipeline as the operator first applies it.
// Each gateway has its own sensors; lines span gateways, so the hub merges
// their partials.
const Revision1 = `name: line-temps
source: {mqtt: {topic: "plant/+/temp", qos: 1, topic_fields: {line: 1}}}
format: json
event_time: {field: ts, unit: ms}
event_id: [sensor, n]          # drops MQTT redeliveries and duplicates
key: [line]
watermark: {max_out_of_order: 2s, idle_timeout: 10s}
window: {tumbling: 5s}
allowed_lateness: 30s
aggregates:
  readings: count()
  avg_temp: avg(temp)
  max_temp: max(temp)
  sensors: distinct(sensor)
`

// Revision2 drops implausible readings: a compatible change (the same
// key, window and aggregates), so the edges keep their open windows and
// the hub merges both revisions' partials while the rollout runs.
var Revision2 = strings.Replace(Revision1, "allowed_lateness: 30s", "filter: \"temp > -40 && temp < 150\"\nallowed_lateness: 30s", 1)

var lines = []string{"A", "B", "C"}

// Run runs the demo until ctx ends or opts.Duration passes.
func Run(ctx context.Context, opts Options) error {
	opts.Edges = cmp.Or(opts.Edges, 3)
	opts.OfflineAt = cmp.Or(opts.OfflineAt, 20*time.Second)
	opts.OfflineFor = cmp.Or(opts.OfflineFor, 15*time.Second)
	opts.Deploy = cmp.Or(opts.Deploy, 2*time.Second)
	opts.Rollout = cmp.Or(opts.Rollout, 24*time.Second)
	opts.Soak = cmp.Or(opts.Soak, 6*time.Second)
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	if opts.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Duration)
		defer cancel()
	}
	dir, err := os.MkdirTemp("", "runnel-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out := &printer{w: opts.Out, start: time.Now()}

	// The hub: the merge core, the fleet store, the server.
	hubDir := filepath.Join(dir, "hub")
	if err := os.MkdirAll(hubDir, 0o755); err != nil {
		return err
	}
	core, fl, err := fleet.OpenWithHub(hubDir, fleet.Options{Logger: lg},
		hub.Config{Dir: hubDir, EdgeTimeout: 4 * time.Second, CommitInterval: 50 * time.Millisecond, Logger: lg})
	if err != nil {
		return err
	}
	defer core.Close()
	defer fl.Close()
	tokens := map[string]string{}
	for i := range opts.Edges {
		tokens[edgeID(i)] = fmt.Sprintf("demo-token-%d", i)
	}
	srv, err := server.New(core, server.Config{GRPCAddr: freeOr(opts.GRPCAddr, "127.0.0.1:7443"),
		HTTPAddr: freeOr(opts.HTTPAddr, "127.0.0.1:7080"), Insecure: true, EdgeTokens: tokens, APIToken: AdminToken,
		Fleet: fl, Logger: lg})
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	hubAddr := srv.GRPCAddr().String()
	out.say("hub: gRPC %s, REST http://%s/v1/fleet/edges; API token %q (runnelctl: export RUNNEL_HUB=%s RUNNEL_TOKEN=%s)",
		hubAddr, srv.HTTPAddr(), AdminToken, hubAddr, AdminToken)
	out.say("fleet: %d gateways, each with its embedded MQTT broker (readings go in-process into its ingest log) and sensors on lines A, B, C; they start with no pipelines", opts.Edges)

	var wg sync.WaitGroup
	errs := make(chan error, opts.Edges+4)
	work, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		wg.Wait()
	}()
	conn, err := grpc.NewClient(hubAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(AdminToken)))
	if err != nil {
		return err
	}
	defer conn.Close()

	// The gateways. Each runs its embedded MQTT broker, which hands its
	// sensors' readings to the ingest log in-process; the last reaches the
	// hub through a relay the demo cuts for a while (its uplink goes down,
	// the gateway keeps working).
	brokers := make([]string, opts.Edges)
	for i := range opts.Edges {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		brokers[i] = addr
		site := "plant-1"
		if i%2 == 1 {
			site = "plant-2"
		}
		nc := edge.NodeConfig{
			EdgeID: edgeID(i), DataDir: filepath.Join(dir, edgeID(i)),
			EmbeddedAddr: addr, Broker: mqtt.Config{Logger: lg},
			CheckpointInterval: 500 * time.Millisecond,
			Uplink: &uplink.Config{Hub: hubAddr, Token: tokens[edgeID(i)], Insecure: true,
				BackoffMin: 200 * time.Millisecond, BackoffMax: time.Second, Logger: lg},
			Fleet:  &edge.FleetConfig{Labels: map[string]string{"site": site, "hw": []string{"rpi4", "cm4"}[i%2]}, Version: "demo", StatusInterval: time.Second},
			Logger: lg,
		}
		if i == opts.Edges-1 && opts.OfflineFor > 0 {
			link, err := newRelay(hubAddr)
			if err != nil {
				return err
			}
			defer link.Close()
			nc.Uplink.Hub = link.Addr()
			wg.Go(func() { goOffline(work, nc.EdgeID, link, opts.OfflineAt, opts.OfflineFor, out) })
		}
		wg.Go(func() {
			if err := edge.Run(work, nc); err != nil {
				errs <- fmt.Errorf("%s: %w", nc.EdgeID, err)
			}
		})
	}
	wg.Go(func() {
		if err := simulate(work, brokers, out); err != nil && work.Err() == nil {
			errs <- fmt.Errorf("sensors: %w", err)
		}
	})
	wg.Go(func() { results(work, conn, out) })
	wg.Go(func() { watchFleet(work, conn, out) })
	wg.Go(func() {
		if err := operate(work, conn, opts, out); err != nil && work.Err() == nil {
			errs <- fmt.Errorf("operator: %w", err)
		}
	})

	select {
	case <-ctx.Done():
		out.say("stopping")
		return nil
	case err := <-errs:
		return err
	}
}

// operate is the operator: it applies revision 1 and deploys it to every
// gateway, then rolls revision 2 out with a canary, through the Fleet API
// (what runnelctl does).
func operate(ctx context.Context, conn *grpc.ClientConn, opts Options, out *printer) error {
	f := runnelv1.NewFleetClient(conn)
	if !sleep(ctx, opts.Deploy) {
		return nil
	}
	r1, err := f.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: Revision1, File: "line-temps.yaml"})
	if err != nil {
		return err
	}
	out.say("operator: runnelctl apply -f line-temps.yaml  -> pipeline line-temps revision %d", r1.GetRevision().GetRevision())
	if _, err := f.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "line-temps",
		Pipelines: []*runnelv1.PipelineRef{{Name: "line-temps"}}}}); err != nil {
		return err
	}
	out.say("operator: deployment line-temps: revision 1 to every gateway, all at once")
	if !sleep(ctx, opts.Rollout-opts.Deploy) {
		return nil
	}
	r2, err := f.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: Revision2, File: "line-temps.yaml"})
	if err != nil {
		return err
	}
	out.say("operator: revision %d adds a filter (compatible: state and merging carry over); rolling it out: 1 canary, then the rest, each step healthy for %s",
		r2.GetRevision().GetRevision(), opts.Soak)
	_, err = f.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "line-temps",
		Pipelines: []*runnelv1.PipelineRef{{Name: "line-temps"}},
		Strategy: &runnelv1.Strategy{Staged: true, Canary: 1, BatchPercent: 100, SoakMs: opts.Soak.Milliseconds(),
			RollbackOnFailure: true}}})
	return err
}

// watchFleet prints each gateway's switch of revision and the rollout's
// steps, as `runnelctl get edges` and `runnelctl rollout status` show them.
func watchFleet(ctx context.Context, conn *grpc.ClientConn, out *printer) {
	f := runnelv1.NewFleetClient(conn)
	seen := map[string]string{}
	phase := ""
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		es, err := f.ListFleetEdges(ctx, &runnelv1.ListFleetEdgesRequest{})
		if err != nil {
			continue
		}
		for _, e := range es.GetEdges() {
			var running []string
			for _, p := range e.GetStatus().GetPipelines() {
				if p.GetRevision() > 0 {
					running = append(running, fmt.Sprintf("%s@%d %s", p.GetName(), p.GetRevision(), p.GetState()))
				}
			}
			now := strings.Join(running, ", ")
			if now != seen[e.GetEdgeId()] && now != "" {
				out.say("fleet: %s (%s) runs %s", e.GetEdgeId(), labelText(e.GetLabels()), now)
			}
			seen[e.GetEdgeId()] = now
		}
		d, err := f.GetDeployment(ctx, &runnelv1.GetDeploymentRequest{Name: "line-temps"})
		if err != nil {
			continue
		}
		r := d.GetRollout()
		p := fmt.Sprintf("v%d %s step %d/%d", d.GetVersion(), r.GetPhase(), r.GetStep()+1, r.GetSteps())
		if p != phase {
			out.say("rollout: deployment line-temps %s: %d of %d gateways applied%s", p, r.GetApplied(), r.GetTargeted(), suffix(r.GetMessage()))
			phase = p
		}
	}
}

func suffix(msg string) string {
	if msg == "" {
		return ""
	}
	return " (" + msg + ")"
}

func labelText(ls map[string]string) string {
	keys := make([]string, 0, len(ls))
	for k := range ls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + ls[k]
	}
	return strings.Join(keys, ",")
}

// results prints the hub's merged results as they are emitted, through
// its subscription API (resubscribing once the pipeline exists).
func results(ctx context.Context, conn *grpc.ClientConn, out *printer) {
	rc := runnelv1.NewResultsClient(conn)
	for ctx.Err() == nil {
		sub, err := rc.Subscribe(ctx, &runnelv1.SubscribeRequest{Pipeline: "line-temps"})
		if err == nil {
			for {
				r, err := sub.Recv()
				if err != nil {
					break
				}
				out.result(r)
			}
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

func edgeID(i int) string { return fmt.Sprintf("edge-%d", i+1) }

// freeAddr returns a loopback address free for a gateway's broker.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// freeOr returns addr when given, else def if it can be bound, else a
// free loopback port.
func freeOr(addr, def string) string {
	if addr != "" {
		return addr
	}
	ln, err := net.Listen("tcp", def)
	if err != nil {
		return "127.0.0.1:0"
	}
	ln.Close()
	return def
}

// goOffline cuts the gateway's link to the hub at offlineAt for
// offlineFor: the gateway keeps taking its sensors' readings and keeps
// their windows' partials in its outbox, and the rollout waits for it.
func goOffline(ctx context.Context, id string, link *relay, at, dur time.Duration, out *printer) {
	if !sleep(ctx, at) {
		return
	}
	link.cut(true)
	out.say("%s loses its uplink for %s: it keeps taking its sensors' readings and aggregating them into its outbox; the hub stops waiting for it after 4 s, and the rollout waits for it", id, dur)
	if !sleep(ctx, dur) {
		return
	}
	link.cut(false)
	out.say("%s's uplink is back: its outbox catches up, it gets the current deployment, and the hub corrects the windows it missed (new versions)", id)
}

// simulate publishes readings to each gateway's broker: two sensors on
// each line, one reading every 200 ms each. Event times jitter by up to
// 1.5 s (out of order); 3% of readings are sent twice (duplicates), 2% are
// 6-15 s late.
func simulate(ctx context.Context, brokers []string, out *printer) error {
	clis := make([]*paho.Client, len(brokers))
	for i, addr := range brokers {
		cli, err := connectSensors(ctx, addr, fmt.Sprintf("sensors-%d", i))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		defer cli.Disconnect(&paho.Disconnect{})
		clis[i] = cli
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	seq := map[string]int{}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var dups, late int
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		now := time.Now()
		for e, cli := range clis {
			for _, line := range lines {
				for s := range 2 {
					sensor := fmt.Sprintf("%s-%s%d", edgeID(e), line, s+1)
					seq[sensor]++
					ts := now.Add(-time.Duration(r.IntN(1500)) * time.Millisecond)
					if r.IntN(100) < 2 && time.Since(start) > 8*time.Second {
						ts = now.Add(-time.Duration(6000+r.IntN(9000)) * time.Millisecond)
						late++
					}
					temp := 20 + 5*float64(strings.Index("ABC", line)) + r.NormFloat64()
					payload := fmt.Appendf(nil, `{"sensor":%q,"n":%d,"ts":%d,"temp":%.2f}`, sensor, seq[sensor], ts.UnixMilli(), temp)
					times := 1
					if r.IntN(100) < 3 {
						times, dups = 2, dups+1
					}
					for range times {
						if _, err := cli.Publish(ctx, &paho.Publish{Topic: "plant/" + line + "/temp", QoS: 1, Payload: payload}); err != nil {
							if ctx.Err() != nil {
								return nil
							}
							return err
						}
					}
				}
			}
		}
		if n := seq[edgeID(0)+"-A1"]; n%150 == 0 {
			out.say("sensors: %d readings so far per sensor; %d sent twice, %d sent late", n, dups, late)
		}
	}
}

// connectSensors connects a gateway's sensors to its embedded broker,
// waiting for the gateway to have started it.
func connectSensors(ctx context.Context, addr, clientID string) (*paho.Client, error) {
	for wait := time.Now().Add(10 * time.Second); ; {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			cli := paho.NewClient(paho.ClientConfig{Conn: conn})
			if _, err = cli.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30}); err == nil {
				return cli, nil
			}
			conn.Close()
		}
		if time.Now().After(wait) {
			return nil, fmt.Errorf("the gateway's broker at %s: %w", addr, err)
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// printer writes the demo's lines, one at a time.
type printer struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (p *printer) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%6.1fs  %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

func (p *printer) result(r *runnelv1.Result) {
	var b strings.Builder
	b.WriteString(structLine(r.Key))
	fmt.Fprintf(&b, " %s-%s v%d", time.UnixMilli(r.WindowStart).Format("15:04:05"), time.UnixMilli(r.WindowEnd).Format("15:04:05"), r.Version)
	b.WriteString("  " + structLine(r.Values))
	fmt.Fprintf(&b, "  edges=%d revisions=%v", r.Edges, r.Revisions)
	if r.Version > 1 {
		b.WriteString("   <- late correction")
	}
	p.say("%s", b.String())
}

// structLine renders a Struct as name=value pairs in name order.
func structLine(s *structpb.Struct) string {
	if s == nil {
		return ""
	}
	names := make([]string, 0, len(s.Fields))
	for n := range s.Fields {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		v := s.Fields[n]
		switch x := v.Kind.(type) {
		case *structpb.Value_NumberValue:
			parts = append(parts, fmt.Sprintf("%s=%.4g", n, x.NumberValue))
		case *structpb.Value_StringValue:
			parts = append(parts, fmt.Sprintf("%s=%s", n, x.StringValue))
		default:
			parts = append(parts, fmt.Sprintf("%s=%v", n, v.AsInterface()))
		}
	}
	return strings.Join(parts, " ")
}
