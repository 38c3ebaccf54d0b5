package server_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/hub/server"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/grpczstd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// certs writes a self-signed certificate for 127.0.0.1 and localhost and
// returns its files and a pool that trusts it.
func certs(t testing.TB) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "runnel-hub test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// env is a started server over TLS on loopback with clients for it.
type env struct {
	srv  *server.Server
	core server.Core
	conn *grpc.ClientConn // for the API
	edge *grpc.ClientConn // for the edge streams: an edge's connection
	http *http.Client
	base string         // https://127.0.0.1:port
	pool *x509.CertPool // trusts the server
}

var edgeTokens = map[string]string{"gw-1": "token-1", "gw-2": "token-2"}

func start(t *testing.T, core server.Core, mod func(*server.Config)) *env {
	t.Helper()
	certFile, keyFile, pool := certs(t)
	cfg := server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, EdgeTokens: edgeTokens, Version: "test", Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := server.New(core, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	tlsCfg := &tls.Config{RootCAs: pool}
	conn, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	edge, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg}
	e := &env{srv: srv, core: core, conn: conn, edge: edge, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}, base: "https://" + srv.HTTPAddr().String(), pool: pool}
	t.Cleanup(func() {
		conn.Close()
		edge.Close()
		tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return e
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func hello(edge string, epoch, next uint64) *runnelv1.SyncRequest {
	return &runnelv1.SyncRequest{Msg: &runnelv1.SyncRequest_Hello{Hello: &runnelv1.Hello{EdgeId: edge, Epoch: epoch, NextSeq: next}}}
}

func batch(b *runnelv1.Batch) *runnelv1.SyncRequest {
	return &runnelv1.SyncRequest{Msg: &runnelv1.SyncRequest_Batch{Batch: b}}
}

func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: got %v, want code %v", what, err, code)
	}
}

// recvErr reads the stream to its end and returns the status.
func recvErr(s grpc.BidiStreamingClient[runnelv1.SyncRequest, runnelv1.SyncResponse]) error {
	for {
		if _, err := s.Recv(); err != nil {
			return err
		}
	}
}

func TestUplinkAuth(t *testing.T) {
	p := testPipeline(t)
	core := newFakeCore(p)
	e := start(t, core, nil)
	up := runnelv1.NewUplinkClient(e.edge)
	ctx := testCtx(t)
	part := &runnelv1.Partial{Seq: 1, Pipeline: "temps", Key: mustKey(t, p, "d1"), WindowStart: 0, WindowEnd: 60000, Version: 1, State: state(p, 20)}

	for _, tc := range []struct {
		name string
		ctx  context.Context
		msgs []*runnelv1.SyncRequest
		code codes.Code
	}{
		{"no token", ctx, []*runnelv1.SyncRequest{hello("gw-1", 1, 1)}, codes.Unauthenticated},
		{"unknown token", withToken(ctx, "token-3"), []*runnelv1.SyncRequest{hello("gw-1", 1, 1)}, codes.Unauthenticated},
		{"token prefix", withToken(ctx, "token-"), []*runnelv1.SyncRequest{hello("gw-1", 1, 1)}, codes.Unauthenticated},
		{"hello of another edge", withToken(ctx, "token-1"), []*runnelv1.SyncRequest{hello("gw-2", 1, 1)}, codes.PermissionDenied},
		{"batch of another edge", withToken(ctx, "token-1"), []*runnelv1.SyncRequest{hello("gw-1", 1, 1),
			batch(&runnelv1.Batch{EdgeId: "gw-2", Epoch: 1, FirstSeq: 1, LastSeq: 1, Partials: []*runnelv1.Partial{part}})}, codes.PermissionDenied},
		{"batch first", withToken(ctx, "token-1"), []*runnelv1.SyncRequest{batch(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 1})}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := up.Sync(tc.ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tc.msgs {
				if err := s.Send(m); err != nil {
					break // the server ended the stream; Recv has the status
				}
			}
			wantCode(t, recvErr(s), tc.code, tc.name)
		})
	}
	if n := core.appliedBatches(); n != 0 {
		t.Errorf("%d batches reached the core", n)
	}
	// The refused Hello of gw-2 never reached the core; gw-1's did.
	for _, ed := range core.Edges() {
		if ed.ID != "gw-1" || ed.AckedSeq != 0 {
			t.Errorf("core state changed: %+v", ed)
		}
	}
	// Over REST: no edge has applied anything, and there are no results.
	var edges struct {
		Edges []struct {
			EdgeID   string `json:"edge_id"`
			AckedSeq string `json:"acked_seq"`
		} `json:"edges"`
	}
	e.getJSON(t, "/v1/edges", "", 200, &edges)
	for _, ed := range edges.Edges {
		if ed.EdgeID == "gw-2" || ed.AckedSeq != "0" {
			t.Errorf("edge after refused streams: %+v", ed)
		}
	}
}

func TestUplinkSync(t *testing.T) {
	p := testPipeline(t)
	core := newFakeCore(p)
	e := start(t, core, nil)
	up := runnelv1.NewUplinkClient(e.edge)
	ctx := withToken(testCtx(t), "token-1")
	part := func(seq uint64, dev string) *runnelv1.Partial {
		return &runnelv1.Partial{Seq: seq, Pipeline: "temps", Key: mustKey(t, p, dev), WindowStart: 0, WindowEnd: 60000, Version: 1, State: state(p, 20)}
	}

	s, err := up.Sync(ctx, grpc.UseCompressor(grpczstd.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(hello("gw-1", 1, 1)); err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r := m.GetResume(); r == nil || r.Epoch != 1 || r.AckedSeq != 0 {
		t.Fatalf("first response %v, want Resume{epoch 1, acked 0}", m)
	}
	for _, b := range []*runnelv1.Batch{
		{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 3, Partials: []*runnelv1.Partial{part(1, "d1"), part(3, "d2")}},
		{EdgeId: "gw-1", Epoch: 1, FirstSeq: 4, LastSeq: 5, Partials: []*runnelv1.Partial{part(5, "d1")},
			Watermarks: []*runnelv1.Watermark{{Pipeline: "temps", WatermarkMs: 61000}}},
	} {
		if err := s.Send(batch(b)); err != nil {
			t.Fatal(err)
		}
	}
	for acked := uint64(0); acked < 5; {
		m, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		a := m.GetAck()
		if a == nil || a.Epoch != 1 || a.AckedSeq <= acked {
			t.Fatalf("got %v after ack %d; want a growing Ack", m, acked)
		}
		acked = a.AckedSeq
	}
	// Closing the send side ends the stream cleanly.
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(s); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want EOF", err)
	}

	// Reconnect: the resume point is the ack; a gap, a bad batch and an
	// old epoch are refused with the codes edges act on.
	sync := func(msgs ...*runnelv1.SyncRequest) error {
		s, err := up.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if s.Send(m) != nil {
				break
			}
		}
		m, err := s.Recv()
		if err != nil {
			return err
		}
		if r := m.GetResume(); r == nil || r.AckedSeq != 5 {
			t.Fatalf("resume %v, want acked_seq 5", m)
		}
		return recvErr(s)
	}
	wantCode(t, sync(hello("gw-1", 1, 6), batch(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 9, LastSeq: 9})), codes.OutOfRange, "gap")
	err = sync(hello("gw-1", 1, 6), batch(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 6, LastSeq: 6,
		Partials: []*runnelv1.Partial{{Seq: 6, Pipeline: "nope"}}}))
	wantCode(t, err, codes.InvalidArgument, "bad batch")
	if !strings.Contains(err.Error(), `unknown pipeline "nope"`) {
		t.Errorf("bad batch error %q does not say why", err)
	}
	// An older epoch: the Resume names the hub's, and a batch of the old
	// one is fenced.
	s2, err := up.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2.Send(hello("gw-1", 0, 1))
	if m, err := s2.Recv(); err != nil || m.GetResume().GetEpoch() != 1 {
		t.Fatalf("Hello with an older epoch: %v %v, want Resume{epoch 1}", m, err)
	}
	s2.Send(batch(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 0, FirstSeq: 1, LastSeq: 1}))
	wantCode(t, recvErr(s2), codes.FailedPrecondition, "fenced")
	if n := core.appliedBatches(); n != 2 {
		t.Errorf("%d batches applied, want 2", n)
	}
}

func (e *env) get(t *testing.T, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", e.base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (e *env) getJSON(t *testing.T, path, token string, wantStatus int, v any) {
	t.Helper()
	code, body := e.get(t, path, token)
	if code != wantStatus {
		t.Fatalf("GET %s: %d %s, want %d", path, code, body, wantStatus)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(body), v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, body)
		}
	}
}

type restResult struct {
	Pipeline    string         `json:"pipeline"`
	Key         map[string]any `json:"key"`
	WindowStart string         `json:"window_start"`
	WindowEnd   string         `json:"window_end"`
	Version     int            `json:"version"`
	Values      map[string]any `json:"values"`
	Edges       int            `json:"edges"`
}

type restResults struct {
	Results       []restResult `json:"results"`
	NextPageToken string       `json:"next_page_token"`
}

func TestREST(t *testing.T) {
	p := testPipeline(t)
	core := newFakeCore(p)
	core.watermark = 120000
	e := start(t, core, func(c *server.Config) { c.APIToken = "reader" })
	for _, r := range []hub.Result{
		{Pipeline: "temps", Key: mustKey(t, p, "d1"), Start: 0, End: 60000, Version: 1, State: state(p, 20), Edges: 1},
		{Pipeline: "temps", Key: mustKey(t, p, "d2"), Start: 0, End: 60000, Version: 1, State: state(p, 30), Edges: 1},
		{Pipeline: "temps", Key: mustKey(t, p, "d1"), Start: 0, End: 60000, Version: 2, State: state(p, 20, 22), Edges: 2},
		{Pipeline: "temps", Key: mustKey(t, p, "d1"), Start: 60000, End: 120000, Version: 1, State: state(p), Edges: 1},
	} {
		core.emit(r)
	}

	// The read token is required.
	if code, body := e.get(t, "/v1/pipelines", ""); code != 401 {
		t.Errorf("without a token: %d %s, want 401", code, body)
	}
	if code, body := e.get(t, "/v1/pipelines", "token-1"); code != 403 || !strings.Contains(body, "edge tokens call only") {
		t.Errorf("with an edge token: %d %s, want 403", code, body)
	}

	var ps struct {
		Pipelines []struct {
			Name        string   `json:"name"`
			KeyFields   []string `json:"key_fields"`
			Window      string   `json:"window"`
			Aggregates  []string `json:"aggregates"`
			WatermarkMs string   `json:"watermark_ms"`
		} `json:"pipelines"`
	}
	e.getJSON(t, "/v1/pipelines", "reader", 200, &ps)
	if len(ps.Pipelines) != 1 || ps.Pipelines[0].Name != "temps" || ps.Pipelines[0].Window != "tumbling 1m0s" ||
		strings.Join(ps.Pipelines[0].KeyFields, ",") != "device" || ps.Pipelines[0].WatermarkMs != "120000" ||
		strings.Join(ps.Pipelines[0].Aggregates, "; ") != "n: count(); avg_temp: avg(temp)" {
		t.Errorf("pipelines: %+v", ps)
	}

	var rs restResults
	e.getJSON(t, "/v1/pipelines/temps/results?key[device]=d1", "reader", 200, &rs)
	if len(rs.Results) != 2 || rs.Results[0].Version != 2 || rs.Results[0].Values["n"] != 2.0 || rs.Results[0].Values["avg_temp"] != 21.0 ||
		rs.Results[0].Key["device"] != "d1" || rs.Results[0].Edges != 2 || rs.Results[1].Values["avg_temp"] != nil {
		t.Errorf("latest of d1: %+v", rs)
	}
	e.getJSON(t, "/v1/pipelines/temps/results?key[device]=d1&all_versions=true&to_ms=60000", "reader", 200, &rs)
	if len(rs.Results) != 2 || rs.Results[0].Version != 1 || rs.Results[1].Version != 2 || rs.Results[0].WindowEnd != "60000" {
		t.Errorf("all versions of d1's first window: %+v", rs)
	}
	e.getJSON(t, "/v1/pipelines/temps/results?from_ms=60000", "reader", 200, &rs)
	if len(rs.Results) != 1 || rs.Results[0].WindowStart != "60000" {
		t.Errorf("from_ms=60000: %+v", rs)
	}
	// Paging: one result a page, until no token.
	var seen []string
	for tok, pages := "", 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		e.getJSON(t, "/v1/pipelines/temps/results?all_versions=true&limit=1&page_token="+tok, "reader", 200, &rs)
		for _, r := range rs.Results {
			seen = append(seen, r.Key["device"].(string))
		}
		if tok = rs.NextPageToken; tok == "" {
			break
		}
	}
	if strings.Join(seen, ",") != "d1,d2,d1,d1" {
		t.Errorf("pages: %v", seen)
	}

	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{"/v1/pipelines/nope/results", 404, `pipeline \"nope\"`},
		{"/v1/pipelines/temps/results?key[site]=x", 400, "missing key fields device; unknown key fields site"},
		{"/v1/pipelines/temps/results?page_token=!!", 400, "page_token"},
		{"/v1/pipelines/temps/results?from_ms=10&to_ms=5", 400, "before from_ms"},
		{"/v1/pipelines/nope/results/events", 404, "nope"},
	} {
		code, body := e.get(t, tc.path, "reader")
		if code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("GET %s: %d %s; want %d with %q", tc.path, code, body, tc.code, tc.msg)
		}
	}

	var h struct {
		Status, Version string
	}
	e.getJSON(t, "/v1/health", "reader", 200, &h)
	if h.Status != "ok" || h.Version != "test" {
		t.Errorf("health: %+v", h)
	}
}

func TestOpsEndpoints(t *testing.T) {
	p := testPipeline(t)
	core := newFakeCore(p)
	core.watermark = 120000
	e := start(t, core, func(c *server.Config) { c.APIToken = "reader" })
	core.emit(hub.Result{Pipeline: "temps", Key: mustKey(t, p, "d1"), End: 60000, Version: 1, State: state(p, 1)})

	code, body := e.get(t, "/v1/openapi.json", "")
	if code != 200 || !strings.Contains(body, `"/v1/pipelines/{pipeline}/results"`) {
		t.Errorf("openapi: %d %.200s", code, body)
	}
	if code, body := e.get(t, "/healthz", ""); code != 200 || !strings.HasPrefix(body, `{"status":"ok"`) {
		t.Errorf("healthz: %d %q", code, body)
	}
	code, body = e.get(t, "/metrics", "")
	for _, want := range []string{"runnel_hub_results_total 1", `runnel_hub_watermark_seconds{class="0",pipeline="temps"} 120`,
		"runnel_hub_commits_total 0", "runnel_hub_edges_live 0", "runnel_hub_commit_duration_seconds", "runnel_hub_uplink_streams 0"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics: %d, missing %q", code, want)
		}
	}
	core.mu.Lock()
	core.commitErr = "hub: commit: disk full"
	core.mu.Unlock()
	if code, body := e.get(t, "/healthz", ""); code != 503 || !strings.Contains(body, "disk full") {
		t.Errorf("healthz after a failed commit: %d %q", code, body)
	}
}

// TestSubscribe checks SSE and the gRPC stream: a result emitted after
// subscribing arrives, filtered by key; heartbeats keep the stream.
func TestSubscribe(t *testing.T) {
	p := testPipeline(t)
	core := newFakeCore(p)
	e := start(t, core, func(c *server.Config) { c.Heartbeat = 20 * time.Millisecond })
	ctx := testCtx(t)

	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/v1/pipelines/temps/results/events?key[device]=d2", nil)
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || lines.Text() != ": subscribed" {
		t.Fatalf("first line %q", lines.Text())
	}

	grpcSub, err := runnelv1.NewResultsClient(e.conn).Subscribe(ctx, &runnelv1.SubscribeRequest{Pipeline: "temps"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grpcSub.Header(); err != nil { // the subscription is in place
		t.Fatal(err)
	}

	// And the gateway's newline-delimited stream.
	// (grpc-gateway writes the response headers with the first result.)
	req2, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/v1/pipelines/temps/results:subscribe?key[device]=d1", nil)
	type response struct {
		*http.Response
		err error
	}
	gwResp := make(chan response, 1)
	go func() {
		r, err := e.http.Do(req2)
		gwResp <- response{r, err}
	}()
	for deadline := time.Now().Add(5 * time.Second); core.subscribers() < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the gateway stream did not subscribe")
		}
	}

	core.emit(hub.Result{Pipeline: "temps", Key: mustKey(t, p, "d1"), End: 60000, Version: 1, State: state(p, 1)})
	core.emit(hub.Result{Pipeline: "temps", Key: mustKey(t, p, "d2"), End: 60000, Version: 3, State: state(p, 5, 7), Edges: 2})

	resp2 := <-gwResp
	if resp2.err != nil {
		t.Fatal(resp2.err)
	}
	var line struct{ Result restResult }
	if err := json.NewDecoder(resp2.Body).Decode(&line); err != nil || line.Result.Key["device"] != "d1" {
		t.Errorf("gateway stream: %+v %v", line, err)
	}
	resp2.Body.Close()

	heartbeats := 0
	var got restResult
	for lines.Scan() {
		line := lines.Text()
		if line == ": heartbeat" {
			heartbeats++
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			if err := json.Unmarshal([]byte(data), &got); err != nil {
				t.Fatalf("%v: %s", err, data)
			}
			break
		}
	}
	if got.Key["device"] != "d2" || got.Version != 3 || got.Values["avg_temp"] != 6.0 || got.Edges != 2 {
		t.Errorf("SSE result: %+v", got)
	}
	for heartbeats == 0 && lines.Scan() {
		if lines.Text() == ": heartbeat" {
			heartbeats++
		}
	}
	if heartbeats == 0 {
		t.Error("no heartbeat")
	}

	for _, want := range []string{"d1", "d2"} {
		r, err := grpcSub.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if dev := r.Key.Fields["device"].GetStringValue(); dev != want {
			t.Errorf("gRPC subscription: got %s, want %s", dev, want)
		}
	}
	// The client leaving ends the subscription in the core.
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for core.subscribers() > 1 && time.Now().Before(deadline) { // the SSE and gateway streams leave
		time.Sleep(5 * time.Millisecond)
	}
	if n := core.subscribers(); n != 1 {
		t.Errorf("%d subscriptions after the SSE client left, want 1 (gRPC)", n)
	}
}

// TestShutdown: open uplink streams and subscriptions do not hold a
// shutdown up; the edge sees Unavailable.
func TestShutdown(t *testing.T) {
	p := testPipeline(t)
	core := newFakeCore(p)
	e := start(t, core, nil)
	ctx := testCtx(t)
	s, err := runnelv1.NewUplinkClient(e.edge).Sync(withToken(ctx, "token-2"))
	if err != nil {
		t.Fatal(err)
	}
	s.Send(hello("gw-2", 1, 1))
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/v1/pipelines/temps/results/events", nil)
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	if err := e.srv.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	wantCode(t, recvErr(s), codes.Unavailable, "stream at shutdown")
	io.Copy(io.Discard, resp.Body) // ends
}

func TestConfigRefused(t *testing.T) {
	core := newFakeCore(testPipeline(t))
	for _, tc := range []struct {
		cfg  server.Config
		want string
	}{
		{server.Config{}, "insecure"},
		{server.Config{CertFile: "x.pem"}, "both"},
		{server.Config{CertFile: "/nonexistent/c.pem", KeyFile: "/nonexistent/k.pem"}, "/nonexistent/c.pem"},
		{server.Config{Insecure: true, EdgeTokens: map[string]string{"a": "t", "b": "t"}}, "share a token"},
		{server.Config{Insecure: true, EdgeTokens: map[string]string{"a": ""}}, "empty token"},
	} {
		if _, err := server.New(core, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
}
