// Package demo runs runnel end to end in one process: an embedded MQTT
// broker, a fleet of edge nodes fed by simulated sensors (out of order,
// late and duplicated readings; one edge drops offline and catches up),
// and a hub that merges their partials and serves them. It prints the
// hub's merged results as they are emitted. `make demo` runs it.
package demo

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
	"github.com/runnel-io/runnel/edge/broker"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/hub/server"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
)

// Options configure a demo run. Zero fields take defaults.
type Options struct {
	Edges    int           // simulated gateways (default 3)
	Duration time.Duration // stop after this long; 0: until ctx ends
	// Offline is when the last edge goes offline, and for how long
	// (defaults 12s and 15s); OfflineFor < 0 keeps every edge online.
	OfflineAt, OfflineFor time.Duration
	GRPCAddr, HTTPAddr    string    // hub listeners (default 127.0.0.1:7443 / :7080, or free ports when taken)
	Out                   io.Writer // the results (default os.Stdout)
	Logger                *slog.Logger
}

// Pipeline is the demo's pipeline; %s is the edge id in the topic filter
// (each edge reads its own sensors from the shared broker).
const Pipeline = `name: line-temps
source: {mqtt: {topic: "fleet/%s/+/temp", qos: 1, topic_fields: {line: 2}}}
format: json
event_time: {field: ts, unit: ms}
event_id: [sensor, n]          # drops MQTT redeliveries and duplicates
key: [line]                    # lines span edges: the hub merges them
watermark: {max_out_of_order: 2s, idle_timeout: 10s}
window: {tumbling: 5s}
allowed_lateness: 30s
aggregates:
  readings: count()
  avg_temp: avg(temp)
  max_temp: max(temp)
  sensors: distinct(sensor)
`

var lines = []string{"A", "B", "C"}

// Run runs the demo until ctx ends or opts.Duration passes.
func Run(ctx context.Context, opts Options) error {
	opts.Edges = cmp.Or(opts.Edges, 3)
	opts.OfflineAt = cmp.Or(opts.OfflineAt, 12*time.Second)
	opts.OfflineFor = cmp.Or(opts.OfflineFor, 15*time.Second)
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

	brk, err := broker.Start(ctx, broker.Options{Addr: "127.0.0.1:0", Logger: lg})
	if err != nil {
		return err
	}
	defer brk.Close(context.Background())

	hubPipe, err := compile("any")
	if err != nil {
		return err
	}
	core, err := hub.Open(hub.Config{Dir: filepath.Join(dir, "hub"), Pipelines: []*operators.Pipeline{hubPipe},
		EdgeTimeout: 4 * time.Second, CommitInterval: 50 * time.Millisecond, Logger: lg})
	if err != nil {
		return err
	}
	defer core.Close()
	tokens := map[string]string{}
	for i := range opts.Edges {
		tokens[edgeID(i)] = fmt.Sprintf("demo-token-%d", i)
	}
	srv, err := server.New(core, server.Config{GRPCAddr: freeOr(opts.GRPCAddr, "127.0.0.1:7443"),
		HTTPAddr: freeOr(opts.HTTPAddr, "127.0.0.1:7080"), Insecure: true, EdgeTokens: tokens, Logger: lg})
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
	out.say("hub: gRPC %s, REST http://%s/v1/pipelines/line-temps/results (live: .../results/events)", hubAddr, srv.HTTPAddr())
	out.say("fleet: %d edges on an embedded MQTT broker (%s); 5 s tumbling windows per production line, merged at the hub", opts.Edges, brk.URL())

	var wg sync.WaitGroup
	errs := make(chan error, opts.Edges+2)
	work, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		wg.Wait()
	}()

	// The results, through the hub's own subscription API.
	conn, err := grpc.NewClient(hubAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	sub, err := runnelv1.NewResultsClient(conn).Subscribe(work, &runnelv1.SubscribeRequest{Pipeline: "line-temps"})
	if err != nil {
		return err
	}
	wg.Go(func() {
		for {
			r, err := sub.Recv()
			if err != nil {
				return
			}
			out.result(r)
		}
	})

	for i := range opts.Edges {
		p, err := compile(edgeID(i))
		if err != nil {
			return err
		}
		nc := edge.NodeConfig{
			EdgeID: edgeID(i), DataDir: filepath.Join(dir, edgeID(i)), Pipelines: []*operators.Pipeline{p},
			Broker: mqtt.Config{Brokers: []string{brk.URL()}, ReceiveMaximum: broker.DefaultMaxInflight,
				SessionExpiry: time.Hour, Logger: lg},
			CheckpointInterval: 500 * time.Millisecond,
			Uplink: &uplink.Config{Hub: hubAddr, Token: tokens[edgeID(i)], Insecure: true,
				BackoffMin: 200 * time.Millisecond, BackoffMax: time.Second, Logger: lg},
			Logger: lg,
		}
		offline := i == opts.Edges-1 && opts.OfflineFor > 0
		wg.Go(func() {
			if err := runEdge(work, nc, offline, opts.OfflineAt, opts.OfflineFor, out); err != nil {
				errs <- fmt.Errorf("%s: %w", nc.EdgeID, err)
			}
		})
	}
	wg.Go(func() {
		if err := simulate(work, brk.Addr(), opts.Edges, out); err != nil && work.Err() == nil {
			errs <- fmt.Errorf("sensors: %w", err)
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

func edgeID(i int) string { return fmt.Sprintf("edge-%d", i+1) }

func compile(edge string) (*operators.Pipeline, error) {
	return operators.CompileYAML("demo pipeline", []byte(fmt.Sprintf(Pipeline, edge)))
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

// runEdge runs one edge node; the offline one stops at offlineAt for
// offlineFor (its sensors keep publishing: the broker keeps their readings
// in its persistent session) and then restarts from its data directory.
func runEdge(ctx context.Context, nc edge.NodeConfig, offline bool, at, dur time.Duration, out *printer) error {
	if !offline {
		return edge.Run(ctx, nc)
	}
	first, cut := context.WithTimeout(ctx, at)
	defer cut()
	if err := edge.Run(first, nc); err != nil || ctx.Err() != nil {
		return err
	}
	out.say("%s goes offline for %s: its sensors keep sending, the broker holds their readings, the hub stops waiting for it after 4 s", nc.EdgeID, dur)
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(dur):
	}
	out.say("%s is back: it catches up, and the hub corrects the windows it missed (new versions)", nc.EdgeID)
	return edge.Run(ctx, nc)
}

// simulate publishes readings: per edge two sensors on each line, one
// reading every 200 ms each. Event times jitter by up to 1.5 s (out of
// order); 3% of readings are sent twice (duplicates), 2% are 6-15 s late.
func simulate(ctx context.Context, hostPort string, edges int, out *printer) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", hostPort)
	if err != nil {
		return err
	}
	cli := paho.NewClient(paho.ClientConfig{Conn: conn})
	if _, err := cli.Connect(ctx, &paho.Connect{ClientID: "demo-sensors", CleanStart: true, KeepAlive: 30}); err != nil {
		return err
	}
	defer cli.Disconnect(&paho.Disconnect{})
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
		for e := range edges {
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
					topic := fmt.Sprintf("fleet/%s/%s/temp", edgeID(e), line)
					times := 1
					if r.IntN(100) < 3 {
						times, dups = 2, dups+1
					}
					for range times {
						if _, err := cli.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: payload}); err != nil {
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
	fmt.Fprintf(&b, "  edges=%d", r.Edges)
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
