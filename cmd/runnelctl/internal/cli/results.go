package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

type resultsFlags struct {
	keys             []string
	from, to         string
	allVersions      bool
	revision         uint32
	follow           bool
	output           string
	limit            int
	resubscribeDelay time.Duration
}

func (a *app) resultsCmd() *cobra.Command {
	var f resultsFlags
	c := &cobra.Command{
		Use:   "results PIPELINE [--key k=v ...] [--from T] [--to T] [--follow]",
		Short: "Query a pipeline's merged window results, or follow them live",
		Long: `results prints the hub's merged results of a pipeline in window order: the
latest version of each window, or every version with --all-versions.

--key k=v picks one key (give every key field); --from and --to bound the
windows (start >= from, end <= to) and take RFC 3339 times (2025-03-01T12:00:00Z),
local dates and times (2025-03-01 12:00), Unix milliseconds, or a duration
meaning that long ago (1h). --revision N picks the results of the
compatibility class holding revision N of a managed pipeline.

--follow prints the results so far, then each new one as the hub emits it,
until interrupted; -o json then writes one JSON object a line.`,
		Example: `  runnelctl results line-temps --key device=d1 --from 1h
  runnelctl results line-temps --follow -o json | jq .values`,
		Args:              exactArgs("PIPELINE"),
		ValidArgsFunction: a.complete(completePipelines, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runResults(cmd.Context(), args[0], &f)
		},
	}
	fs := c.Flags()
	fs.StringArrayVar(&f.keys, "key", nil, "key field value, k=v (repeatable)")
	fs.StringVar(&f.from, "from", "", "windows starting at or after this time")
	fs.StringVar(&f.to, "to", "", "windows ending at or before this time")
	fs.BoolVar(&f.allVersions, "all-versions", false, "every version of each window, oldest first")
	fs.Uint32Var(&f.revision, "revision", 0, "results of the compatibility class of this revision (default: the latest's)")
	fs.BoolVarP(&f.follow, "follow", "F", false, "then follow new results until interrupted")
	fs.StringVarP(&f.output, "output", "o", "table", "table or json")
	fs.IntVar(&f.limit, "limit", 1000, "at most this many results of the query (0: all)")
	fs.DurationVar(&f.resubscribeDelay, "resubscribe-delay", time.Second, "with --follow, wait before subscribing again when the hub drops the subscription")
	fs.MarkHidden("resubscribe-delay")
	c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}

// parseTime reads a --from/--to value as Unix milliseconds.
func (a *app) parseTime(flag, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return n, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixMilli(), nil
	}
	loc := a.env.Location
	if loc == nil {
		loc = time.Local
	}
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t.UnixMilli(), nil
		}
	}
	if d, err := spec.ParseDuration(strings.TrimPrefix(s, "-")); err == nil {
		return a.now().Add(-d.Std()).UnixMilli(), nil
	}
	return 0, usagef("--%s %q: not a time: give 2025-03-01T12:00:00Z, 2025-03-01 12:00, Unix milliseconds, or a duration ago such as 1h", flag, s)
}

func parseKeys(args []string) (map[string]string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, arg := range args {
		k, v, ok := strings.Cut(arg, "=")
		if !ok || k == "" {
			return nil, usagef("--key %q: give a key field and its value, k=v", arg)
		}
		if old, dup := m[k]; dup && old != v {
			return nil, usagef("--key %q: %s is given twice", arg, k)
		}
		m[k] = v
	}
	return m, nil
}

func (a *app) runResults(ctx context.Context, pipeline string, f *resultsFlags) error {
	if err := checkOutput(f.output, "table", "json"); err != nil {
		return err
	}
	if f.limit < 0 {
		return usagef("--limit %d: must be 0 (all) or more", f.limit)
	}
	key, err := parseKeys(f.keys)
	if err != nil {
		return err
	}
	from, err := a.parseTime("from", f.from)
	if err != nil {
		return err
	}
	to, err := a.parseTime("to", f.to)
	if err != nil {
		return err
	}
	rc, err := a.results()
	if err != nil {
		return err
	}
	req := &runnelv1.QueryResultsRequest{Pipeline: pipeline, Key: key, FromMs: from, ToMs: to,
		AllVersions: f.allVersions, Revision: f.revision}
	if !f.follow {
		resp, err := a.query(ctx, rc, req, f.limit)
		if err != nil {
			return err
		}
		if f.output == "json" {
			return printProto(a.env.Stdout, resp, "json")
		}
		if len(resp.GetResults()) == 0 {
			a.empty("results")
			return nil
		}
		p := a.newResultPrinter(f.output, resp.GetResults())
		for _, r := range resp.GetResults() {
			p.print(r)
		}
		p.t.write(a.env.Stdout)
		if resp.GetNextPageToken() != "" {
			fmt.Fprintf(a.env.Stderr, "more results than --limit %d; narrow --from/--to or raise --limit\n", f.limit)
		}
		return nil
	}
	return a.follow(ctx, rc, req, f)
}

// query pages through QueryResults until the end or limit (0: all).
func (a *app) query(ctx context.Context, rc runnelv1.ResultsClient, req *runnelv1.QueryResultsRequest, limit int) (*runnelv1.QueryResultsResponse, error) {
	out := &runnelv1.QueryResultsResponse{}
	req.PageToken = ""
	for {
		req.Limit = 0
		if limit > 0 {
			req.Limit = uint32(min(limit-len(out.Results), 10000))
		}
		cctx, cancel := a.call(ctx)
		resp, err := rc.QueryResults(cctx, req)
		cancel()
		if err != nil {
			return nil, a.wrap(err, "results of pipeline %s", req.Pipeline)
		}
		out.Results = append(out.Results, resp.GetResults()...)
		out.NextPageToken = resp.GetNextPageToken()
		if out.NextPageToken == "" || (limit > 0 && len(out.Results) >= limit) || len(resp.GetResults()) == 0 {
			return out, nil
		}
		req.PageToken = out.NextPageToken
	}
}

// resultPrinter prints results as table rows or JSON lines.
type resultPrinter struct {
	a      *app
	output string
	names  []string // value columns
	t      *table   // a query's rows, written at the end
	s      *streamTable
	header bool
}

func (a *app) newResultPrinter(output string, first []*runnelv1.Result) *resultPrinter {
	p := &resultPrinter{a: a, output: output}
	p.setNames(first)
	head := append([]string{"WINDOW START", "END", "KEY", "VERSION", "REVISIONS"}, p.names...)
	p.t = newTable(head...)
	return p
}

func (p *resultPrinter) setNames(rs []*runnelv1.Result) {
	seen := map[string]bool{}
	for _, r := range rs {
		for k := range r.GetValues().GetFields() {
			seen[k] = true
		}
	}
	p.names = p.names[:0]
	for k := range seen {
		p.names = append(p.names, k)
	}
	sort.Strings(p.names)
}

func (p *resultPrinter) row(r *runnelv1.Result) []string {
	a := p.a
	end := a.abs(r.GetWindowEnd())
	if s := a.abs(r.GetWindowStart()); len(s) > 10 && len(end) > 10 && s[:10] == end[:10] {
		end = end[11:19] // the same day: the time alone
	}
	revs := make([]string, len(r.GetRevisions()))
	for i, v := range r.GetRevisions() {
		revs[i] = fmt.Sprint(v)
	}
	row := []string{a.abs(r.GetWindowStart()), end, structText(r.GetKey()), fmt.Sprint(r.GetVersion()), strings.Join(revs, ",")}
	for _, n := range p.names {
		row = append(row, valueText(r.GetValues().GetFields()[n]))
	}
	return row
}

// print adds r: a row of the query's table, or (following) a line now.
func (p *resultPrinter) print(r *runnelv1.Result) {
	if p.s == nil {
		p.t.add(p.row(r)...)
		return
	}
	if p.output == "json" {
		data, _ := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(r)
		fmt.Fprintf(p.a.env.Stdout, "%s\n", data)
		return
	}
	if !p.header {
		if len(p.names) == 0 {
			p.setNames([]*runnelv1.Result{r})
		}
		p.s.row(append([]string{"WINDOW START", "END", "KEY", "VERSION", "REVISIONS"}, p.names...)...)
		p.header = true
	}
	p.s.row(p.row(r)...)
}

// structText renders a key as k=v,k=v, fields sorted.
func structText(s *structpb.Struct) string {
	m := map[string]string{}
	for k, v := range s.GetFields() {
		m[k] = valueText(v)
	}
	return labels(m)
}

func valueText(v *structpb.Value) string {
	switch k := v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return ""
	case *structpb.Value_NumberValue:
		return number(k.NumberValue)
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(k.BoolValue)
	}
	data, _ := protojson.Marshal(v)
	return string(data)
}

// follow subscribes, prints the results so far, then each new one. When
// the hub drops the subscription it subscribes again and queries from
// the last window seen, so nothing is missed (a result may repeat:
// results are upserts). It ends without error when ctx does.
func (a *app) follow(ctx context.Context, rc runnelv1.ResultsClient, req *runnelv1.QueryResultsRequest, f *resultsFlags) error {
	p := &resultPrinter{a: a, output: f.output, s: &streamTable{w: a.env.Stdout}}
	sub := &runnelv1.SubscribeRequest{Pipeline: req.Pipeline, Key: req.Key}
	inRange := func(r *runnelv1.Result) bool {
		return (req.FromMs == 0 || r.GetWindowStart() >= req.FromMs) && (req.ToMs == 0 || r.GetWindowEnd() <= req.ToMs)
	}
	var last int64
	for {
		sctx, cancel := context.WithCancel(ctx)
		stream, err := rc.Subscribe(sctx, sub)
		if err == nil {
			_, err = stream.Header() // the subscription is in place
		}
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			return a.wrap(err, "follow results of pipeline %s", req.Pipeline)
		}
		q := proto.Clone(req).(*runnelv1.QueryResultsRequest)
		if last > q.FromMs {
			q.FromMs = last
		}
		resp, err := a.query(ctx, rc, q, f.limit)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if len(p.names) == 0 {
			p.setNames(resp.GetResults())
		}
		for _, r := range resp.GetResults() {
			p.print(r)
			last = max(last, r.GetWindowStart())
		}
	recv:
		for {
			r, err := stream.Recv()
			if err != nil {
				cancel()
				switch {
				case ctx.Err() != nil:
					return nil
				case errors.Is(err, io.EOF):
					return nil // the hub closed the stream
				case isCode(err, codes.Unavailable):
					fmt.Fprintf(a.env.Stderr, "runnelctl: the hub dropped the subscription (%v); subscribing again\n", statusMessage(err))
				default:
					return a.wrap(err, "follow results of pipeline %s", req.Pipeline)
				}
				break recv
			}
			if inRange(r) {
				p.print(r)
				last = max(last, r.GetWindowStart())
			}
		}
		t := time.NewTimer(f.resubscribeDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func statusMessage(err error) string { return status.Convert(err).Message() }
