package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testcert"
	"github.com/runnel-io/runnel/internal/testproc"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// TestEdgeClientCertificates: a runnel-hub requiring client certificates
// (tls.client_auth: require, no edge tokens at all) and runnel-edge
// processes reading a real Mosquitto. An edge with its certificate and no
// token delivers its readings exactly once. Edges with a certificate of
// another CA, or an expired one, run (they keep ingesting) but are
// refused: each logs that the hub refused its certificate and counts the
// failed streams, the hub counts the failed handshakes, and the hub's
// results and edges are as before. An edge given another edge's
// certificate refuses to start, naming the problem, and a forged client
// holding e1's certificate cannot say Hello as another edge.
func TestEdgeClientCertificates(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	dir := t.TempDir()
	testproc.Build(t, dir, "../../cmd/runnel-edge", "../../cmd/runnel-hub")
	mosq := testbroker.Start(t)
	ca, err := testcert.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	otherDir := filepath.Join(dir, "other")
	os.Mkdir(otherDir, 0o755)
	otherCA, err := testcert.Write(otherDir)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(from testcert.Files, name string, c testcert.Client) [2]string {
		cert, key, err := testcert.WriteClient(from, dir, name, c)
		if err != nil {
			t.Fatal(err)
		}
		return [2]string{cert, key}
	}
	spec := func(name, topic string) string {
		p := filepath.Join(dir, name)
		s := fmt.Sprintf(`name: m
source: {mqtt: {topic: "%s", qos: 1}}
event_time: {field: ts, unit: ms}
key: [k]
watermark: {max_out_of_order: 200ms, idle_timeout: 1s}
window: {tumbling: 1s}
allowed_lateness: 1h
aggregates: {n: count(), sum: sum(v)}
`, topic)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goodSpec, badSpec := spec("good.yaml", "good/+"), spec("bad.yaml", "bad/+")

	const apiToken = "mtls-api-token-0123456789"
	hubGRPC, hubHTTP := freePort(t), freePort(t)
	hub := &testproc.Proc{Name: "hub", Args: []string{filepath.Join(dir, "runnel-hub"), "--data-dir", filepath.Join(dir, "hub"),
		"--pipeline", goodSpec, "--grpc-addr", hubGRPC, "--http-addr", hubHTTP,
		"--tls-cert-file", ca.Cert, "--tls-key-file", ca.Key, "--tls-client-auth", "require", "--tls-client-ca-file", ca.CA,
		"--api-token", apiToken, "--edge-timeout", "2s", "--commit-interval", "20ms"}}
	hub.Start(t)
	defer hub.Kill()
	hub.WaitLog(t, "runnel-hub: ready")

	edgeArgs := func(id, specFile string, cert [2]string) []string {
		return []string{filepath.Join(dir, "runnel-edge"), "run", "--pipeline", specFile,
			"--data-dir", filepath.Join(dir, "edge-"+id), "--broker-url", mosq.Addr(), "--edge-id", id,
			"--checkpoint-interval", "100ms", "--http-addr", freePort(t), "--fleet-enabled=false",
			"--uplink-hub", hubGRPC, "--uplink-tls-ca-file", ca.CA, "--uplink-tls-cert-file", cert[0], "--uplink-tls-key-file", cert[1]}
	}
	httpOf := func(p *testproc.Proc) string {
		for i, a := range p.Args {
			if a == "--http-addr" {
				return p.Args[i+1]
			}
		}
		return ""
	}

	// The API: over TLS, with the API token and no client certificate.
	roots := x509.NewCertPool()
	pem, _ := os.ReadFile(ca.CA)
	roots.AppendCertsFromPEM(pem)
	api, err := grpc.NewClient(hubGRPC, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})),
		grpc.WithPerRPCCredentials(bearer(apiToken)))
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	rc := runnelv1.NewResultsClient(api)
	totals := func() (n, sum int64, windows int) {
		for _, r := range queryAll(t, rc, "m", false) {
			v := r.Values.AsMap()
			n += int64(v["n"].(float64))
			sum += int64(v["sum"].(float64))
			windows++
		}
		return n, sum, windows
	}
	edges := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := rc.ListEdges(ctx, &runnelv1.ListEdgesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range resp.Edges {
			out = append(out, fmt.Sprintf("%s@%d", e.EdgeId, e.AckedSeq))
		}
		return strings.Join(out, ",")
	}

	// A good certificate: e1, no token, listed nowhere at the hub.
	e1 := &testproc.Proc{Name: "e1", Args: edgeArgs("e1", goodSpec, issue(ca, "e1", testcert.Client{CommonName: "e1"}))}
	e1.Start(t)
	defer func() { e1.Kill() }()
	e1.WaitLog(t, "edge: ready")
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	defer pub.Close()
	base := time.Now().UnixMilli()/1000*1000 - 30_000
	const readings = 300
	var wantSum int64
	for i := range readings {
		v := int64(i % 13)
		wantSum += v
		pub.MustPublish("good/x", fmt.Appendf(nil, `{"k":"d%d","ts":%d,"v":%d}`, i%4, base+int64(i)*20, v), 1)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, sum, _ := totals()
		if n == readings && sum == wantSum {
			break
		}
		if n > readings || time.Now().After(deadline) {
			t.Fatalf("hub has n=%d sum=%d, want %d and %d (exactly once)\nhub log:\n%s\ne1 log:\n%s", n, sum, readings, wantSum, hub.Logs.String(), e1.Logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Everything acked: the edge's outbox drains, and the hub holds e1's
	// sequence; the results stay put.
	waitMetric(t, httpOf(e1), "runnel_edge_outbox_depth", func(v float64) bool { return v == 0 }, e1)
	time.Sleep(500 * time.Millisecond)
	n0, sum0, windows0 := totals()
	edges0 := edges()
	if n0 != readings || sum0 != wantSum || !strings.HasPrefix(edges0, "e1@") || strings.Contains(edges0, ",") {
		t.Fatalf("after e1: n=%d sum=%d, edges %s", n0, sum0, edges0)
	}
	e1.Kill()
	handshakes := func() float64 { return scrapeTLS(t, hubHTTP, roots)["runnel_hub_tls_handshake_failures_total"] }
	h0 := handshakes()

	for _, bad := range []struct {
		id   string
		cert [2]string
		want string // in the edge's log
	}{
		{"e3", issue(otherCA, "e3-other", testcert.Client{CommonName: "e3"}), "unknown certificate authority"},
		{"e4", issue(ca, "e4-old", testcert.Client{CommonName: "e4", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)}), "expired certificate"},
	} {
		t.Run(bad.id, func(t *testing.T) {
			p := &testproc.Proc{Name: bad.id, Args: edgeArgs(bad.id, badSpec, bad.cert)}
			p.Start(t)
			defer p.Kill()
			p.WaitLog(t, "edge: ready")
			for i := range 50 {
				pub.MustPublish("bad/x", fmt.Appendf(nil, `{"k":"d%d","ts":%d,"v":100}`, i%4, base+int64(i)*20), 1)
			}
			waitEdgeMetric(t, p, httpOf(p), bad.id, "runnel_edge_uplink_reconnects_total", func(v float64) bool { return v >= 3 })
			waitEdgeMetric(t, p, httpOf(p), bad.id, "runnel_edge_outbox_depth", func(v float64) bool { return v > 0 })
			p.WaitLog(t, "the hub refused this edge's TLS client certificate")
			p.WaitLog(t, bad.want)
			m := scrapeEdge(httpOf(p), bad.id)
			if m["runnel_edge_uplink_connected"] != 0 || m["runnel_edge_uplink_acked_seq"] != 0 || m["runnel_edge_uplink_batches_total"] != 0 {
				t.Errorf("%s got through: connected %v, acked %v, batches %v", bad.id, m["runnel_edge_uplink_connected"], m["runnel_edge_uplink_acked_seq"], m["runnel_edge_uplink_batches_total"])
			}
			if n, sum, w := totals(); n != n0 || sum != sum0 || w != windows0 {
				t.Errorf("the hub's results changed: n=%d sum=%d windows=%d, were %d %d %d", n, sum, w, n0, sum0, windows0)
			}
			if e := edges(); e != edges0 {
				t.Errorf("the hub's edges changed: %s, were %s", e, edges0)
			}
			// gRPC's channel backs off its reconnects on its own, and fails
			// streams meanwhile with the last error: fewer handshakes than
			// failed streams.
			if h := handshakes(); h <= h0 {
				t.Errorf("hub counted %v failed handshakes, had %v before", h, h0)
			}
			h0 = handshakes()
		})
	}
	if !strings.Contains(hub.Logs.String(), "TLS handshake failed") {
		t.Error("the hub logged no failed handshake")
	}

	// Another edge's certificate: the edge refuses to start (exit 2),
	// saying why.
	out, err := exec.Command(filepath.Join(dir, "runnel-edge"), edgeArgs("e2", goodSpec, issue(ca, "e1-again", testcert.Client{CommonName: "e1"}))[1:]...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), `the certificate is another edge's: its subject CN is "e1", and this edge is "e2"`) {
		t.Errorf("edge e2 with e1's certificate: %v\n%s", err, out)
	}
	// A forged client with e1's certificate: Hello as e2 is refused; as e1
	// it is answered.
	e1Pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "e1.pem"), filepath.Join(dir, "e1.key"))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := grpc.NewClient(hubGRPC, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{e1Pair}})))
	if err != nil {
		t.Fatal(err)
	}
	defer forged.Close()
	if err := certHello(forged, "e2"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "this stream is edge e1's") {
		t.Errorf("Hello as e2 with e1's certificate: %v", err)
	}
	if err := certHello(forged, "e1"); err != nil {
		t.Errorf("Hello as e1 with e1's certificate: %v", err)
	}
	if e := edges(); strings.Contains(e, "e2") {
		t.Errorf("the hub knows e2: %s", e)
	}
	if n, sum, _ := totals(); n != n0 || sum != sum0 {
		t.Errorf("results changed: n=%d sum=%d", n, sum)
	}
	m := scrapeTLS(t, hubHTTP, roots)
	if m["runnel_hub_uplink_permission_denied_total"] != 1 {
		t.Errorf("runnel_hub_uplink_permission_denied_total %v, want 1", m["runnel_hub_uplink_permission_denied_total"])
	}
}

// scrapeEdge is scrape for edge id.
func scrapeEdge(addr, id string) map[string]float64 {
	m := map[string]float64{}
	for k, v := range scrape(addr) {
		for _, l := range []string{`edge="` + id + `",`, `,edge="` + id + `"`, `edge="` + id + `"`} {
			k = strings.Replace(k, l, "", 1)
		}
		m[strings.Replace(k, "{}", "", 1)] = v
	}
	return m
}

// waitEdgeMetric waits up to 30 s for edge id's metric to satisfy ok.
func waitEdgeMetric(t *testing.T, p *testproc.Proc, addr, id, name string, ok func(float64) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		v, found := scrapeEdge(addr, id)[name]
		if found && ok(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s is %v (found %v)\n%s", id, name, v, found, p.Logs.String())
		}
	}
}

// certHello says Hello as edge with the connection's credentials and
// reads the answer: nil for a Resume.
func certHello(conn *grpc.ClientConn, edge string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := runnelv1.NewUplinkClient(conn).Sync(ctx)
	if err != nil {
		return err
	}
	if err := s.Send(&runnelv1.SyncRequest{Msg: &runnelv1.SyncRequest_Hello{Hello: &runnelv1.Hello{EdgeId: edge, Epoch: 1, NextSeq: 1}}}); err != nil {
		return err
	}
	m, err := s.Recv()
	if err == nil && m.GetResume() == nil {
		return fmt.Errorf("answer %v", m)
	}
	return err
}

// scrapeTLS reads the hub's /metrics over HTTPS.
func scrapeTLS(t *testing.T, addr string, roots *x509.CertPool) map[string]float64 {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}
