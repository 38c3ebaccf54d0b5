package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/hub/server"
	"github.com/runnel-io/runnel/internal/edgecert"
	"github.com/runnel-io/runnel/internal/testcert"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/sync/uplink/uplinktest"
)

// mtlsEnv is a server with client authentication on, its CA, and client
// certificates by name: gw-1 and gw-2 (each its edge's), not-edge (CN
// "not an edge"), expired (gw-1's, expired an hour ago), server-only
// (gw-1's, for server authentication only), other-ca (gw-1's, from
// another CA).
type mtlsEnv struct {
	srv   *server.Server
	core  *fakeCore
	ff    *fakeFleet
	certs map[string][2]string
	roots *x509.CertPool
}

func startMTLS(t *testing.T, mode server.ClientAuth) *mtlsEnv {
	t.Helper()
	dir := t.TempDir()
	ca, err := testcert.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	otherDir := t.TempDir()
	other, err := testcert.Write(otherDir)
	if err != nil {
		t.Fatal(err)
	}
	m := &mtlsEnv{core: newFakeCore(testPipeline(t)), ff: newFakeFleet(), certs: map[string][2]string{}, roots: x509.NewCertPool()}
	for _, c := range []struct {
		name string
		ca   testcert.Files
		c    testcert.Client
	}{
		{"gw-1", ca, testcert.Client{CommonName: "gw-1"}},
		{"gw-2", ca, testcert.Client{CommonName: "gw-2"}},
		{"not-edge", ca, testcert.Client{CommonName: "not an edge"}},
		{"expired", ca, testcert.Client{CommonName: "gw-1", NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}},
		{"server-only", ca, testcert.Client{CommonName: "gw-1", ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}},
		{"other-ca", other, testcert.Client{CommonName: "gw-1"}},
	} {
		cert, key, err := testcert.WriteClient(c.ca, dir, c.name, c.c)
		if err != nil {
			t.Fatal(err)
		}
		m.certs[c.name] = [2]string{cert, key}
	}
	pem, _ := os.ReadFile(ca.CA)
	m.roots.AppendCertsFromPEM(pem)
	cfg := server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", CertFile: ca.Cert, KeyFile: ca.Key,
		ClientAuth: mode, EdgeTokens: edgeTokens, APIToken: "api-token-0123456789", Fleet: m.ff, Version: "test", Logger: slog.New(slog.DiscardHandler)}
	if mode != server.ClientAuthNone {
		cfg.ClientCAFile = ca.CA
	}
	if m.srv, err = server.New(m.core, cfg); err != nil {
		t.Fatal(err)
	}
	if err := m.srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return m
}

// dial connects with the client certificate of that name ("": none).
func (m *mtlsEnv) dial(t *testing.T, cert string) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{RootCAs: m.roots}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(m.certs[cert][0], m.certs[cert][1])
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	conn, err := grpc.NewClient(m.srv.GRPCAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (m *mtlsEnv) metric(t *testing.T, name string) string {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: m.roots}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + m.srv.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// hello opens an uplink stream and says Hello as edge; it returns the
// status the stream ends with, or nil when the hub answered with a
// Resume.
func helloAs(ctx context.Context, conn *grpc.ClientConn, tok, edge string) error {
	if tok != "" {
		ctx = withToken(ctx, tok)
	}
	s, err := runnelv1.NewUplinkClient(conn).Sync(ctx)
	if err != nil {
		return err
	}
	defer s.CloseSend()
	if err := s.Send(hello(edge, 1, 1)); err != nil {
		return recvErr(s)
	}
	m, err := s.Recv()
	if err != nil {
		return err
	}
	if m.GetResume() == nil {
		return fmt.Errorf("answer %v, want a Resume", m)
	}
	return nil
}

// TestClientCertAuth is the decision table of an edge's credentials on
// the uplink: a verified client certificate names its edge (subject CN)
// as a token does, and goes through the same check of the Hello's edge
// id; a certificate and a token must be of the same edge; a certificate
// the TLS stack refuses (another CA, expired, not for client
// authentication) never gets to a call.
func TestClientCertAuth(t *testing.T) {
	const api = "api-token-0123456789"
	for _, tc := range []struct {
		mode             server.ClientAuth
		cert, tok, edge  string
		code             codes.Code
		msg              string // in the refusal
		reason           string // runnel_hub_edge_auth_refused_total's label
		handshakeRefusal bool
	}{
		{server.ClientAuthOptional, "gw-1", "", "gw-1", codes.OK, "", "", false},
		{server.ClientAuthOptional, "gw-1", "token-1", "gw-1", codes.OK, "", "", false},
		{server.ClientAuthOptional, "", "token-1", "gw-1", codes.OK, "", "", false},
		{server.ClientAuthOptional, "gw-1", "", "gw-2", codes.PermissionDenied, "this stream is edge gw-1's", "", false},
		{server.ClientAuthOptional, "gw-1", "token-2", "gw-2", codes.PermissionDenied, "certificate is edge gw-1's and the token edge gw-2's", "certificate_token_mismatch", false},
		{server.ClientAuthOptional, "gw-1", "token-2", "gw-1", codes.PermissionDenied, "certificate is edge gw-1's and the token edge gw-2's", "certificate_token_mismatch", false},
		{server.ClientAuthOptional, "gw-1", "token-9", "gw-1", codes.Unauthenticated, "unknown token", "token", false},
		{server.ClientAuthOptional, "gw-1", api, "gw-1", codes.PermissionDenied, "API tokens", "token", false},
		{server.ClientAuthOptional, "", "", "gw-1", codes.Unauthenticated, "missing bearer token", "no_credentials", false},
		{server.ClientAuthOptional, "not-edge", "", "gw-1", codes.Unauthenticated, `CN "not an edge" is not an edge id`, "certificate_not_an_edge", false},
		{server.ClientAuthOptional, "not-edge", "token-1", "gw-1", codes.Unauthenticated, `CN "not an edge" is not an edge id`, "certificate_not_an_edge", false},
		{server.ClientAuthOptional, "expired", "token-1", "gw-1", codes.Unavailable, "", "", true},
		{server.ClientAuthOptional, "other-ca", "token-1", "gw-1", codes.Unavailable, "", "", true},
		{server.ClientAuthOptional, "server-only", "token-1", "gw-1", codes.Unavailable, "", "", true},
		{server.ClientAuthRequire, "gw-2", "", "gw-2", codes.OK, "", "", false},
		{server.ClientAuthRequire, "gw-2", "token-2", "gw-2", codes.OK, "", "", false},
		{server.ClientAuthRequire, "", "token-1", "gw-1", codes.Unauthenticated, "requires edges to present a TLS client certificate", "certificate_required", false},
		{server.ClientAuthRequire, "expired", "", "gw-1", codes.Unavailable, "", "", true},
		{server.ClientAuthRequire, "gw-1", "token-2", "gw-2", codes.PermissionDenied, "certificate is edge gw-1's and the token edge gw-2's", "certificate_token_mismatch", false},
		// The hub asks for no certificate: the client sends none, and a
		// token is needed as before.
		{server.ClientAuthNone, "gw-1", "", "gw-1", codes.Unauthenticated, "missing bearer token", "no_credentials", false},
		{server.ClientAuthNone, "gw-1", "token-1", "gw-1", codes.OK, "", "", false},
	} {
		name := fmt.Sprintf("%s/cert=%s/token=%s/hello=%s", tc.mode, tc.cert, tc.tok, tc.edge)
		t.Run(name, func(t *testing.T) {
			m := startMTLS(t, tc.mode)
			err := helloAs(testCtx(t), m.dial(t, tc.cert), tc.tok, tc.edge)
			if status.Code(err) != tc.code || !strings.Contains(fmt.Sprint(err), tc.msg) {
				t.Fatalf("got %v, want %v with %q", err, tc.code, tc.msg)
			}
			edges := m.core.Edges()
			if tc.code == codes.OK {
				if len(edges) != 1 || edges[0].ID != tc.edge {
					t.Errorf("core's edges %+v, want %s's Hello", edges, tc.edge)
				}
				return
			}
			if len(edges) != 0 {
				t.Errorf("a refused Hello reached the core: %+v", edges)
			}
			if tc.reason != "" {
				if got := m.metric(t, "runnel_hub_edge_auth_refused_total"); !strings.Contains(got, `reason="`+tc.reason+`"} 1`) {
					t.Errorf("metrics: %s; want reason %s counted once", got, tc.reason)
				}
			}
			if got := m.metric(t, "runnel_hub_tls_handshake_failures_total "); tc.handshakeRefusal != (got != "runnel_hub_tls_handshake_failures_total 0") {
				t.Errorf("handshake failures: %s, refused in the handshake: %v", got, tc.handshakeRefusal)
			}
		})
	}
}

// TestClientCertControlAndAPI: the control stream holds a certificate's
// edge to its Register like a token's; an edge certificate calls no API
// method whatever its token, and API clients need no certificate even
// under require.
func TestClientCertControlAndAPI(t *testing.T) {
	const api = "api-token-0123456789"
	m := startMTLS(t, server.ClientAuthRequire)
	ctx := testCtx(t)
	edgeConn, plain := m.dial(t, "gw-1"), m.dial(t, "")

	for _, tc := range []struct {
		register string
		code     codes.Code
	}{{"gw-2", codes.PermissionDenied}, {"gw-1", codes.OK}} {
		s, err := runnelv1.NewControlClient(edgeConn).Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(register(tc.register)); err != nil {
			t.Fatal(err)
		}
		if tc.code != codes.OK {
			_, err := s.Recv()
			wantCode(t, err, tc.code, "Register "+tc.register)
			continue
		}
		if !m.ff.waitFor(ctx, func() bool { return m.ff.count("Connect") == 1 }) {
			t.Fatal("the fleet never saw gw-1's Register")
		}
		if c, _ := m.ff.last("Connect"); c.who != "gw-1" {
			t.Errorf("Connect as %q", c.who)
		}
		s.CloseSend()
	}
	if n := m.ff.count("Connect"); n != 1 {
		t.Errorf("the fleet saw %d Connects, want gw-1's only", n)
	}

	res := runnelv1.NewResultsClient(edgeConn)
	for _, tok := range []string{"", api, "token-1"} {
		c := ctx
		if tok != "" {
			c = withToken(ctx, tok)
		}
		_, err := res.ListEdges(c, &runnelv1.ListEdgesRequest{})
		wantCode(t, err, codes.PermissionDenied, "ListEdges with an edge certificate, token "+tok)
	}
	if _, err := runnelv1.NewResultsClient(plain).ListEdges(withToken(ctx, api), &runnelv1.ListEdgesRequest{}); err != nil {
		t.Errorf("ListEdges without a certificate under require: %v", err)
	}
}

func TestClientAuthConfigRefused(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcert.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	core := newFakeCore(testPipeline(t))
	for _, tc := range []struct {
		cfg  server.Config
		want string
	}{
		{server.Config{Insecure: true, ClientAuth: server.ClientAuthOptional, ClientCAFile: ca.CA}, "needs TLS"},
		{server.Config{CertFile: ca.Cert, KeyFile: ca.Key, ClientAuth: server.ClientAuthRequire}, "needs a client CA file"},
		{server.Config{CertFile: ca.Cert, KeyFile: ca.Key, ClientCAFile: ca.CA}, "without client auth"},
		{server.Config{CertFile: ca.Cert, KeyFile: ca.Key, ClientAuth: "sometimes", ClientCAFile: ca.CA}, "use none, optional or require"},
		{server.Config{CertFile: ca.Cert, KeyFile: ca.Key, ClientAuth: server.ClientAuthOptional, ClientCAFile: ca.Key}, "holds no PEM certificate"},
		{server.Config{CertFile: ca.Cert, KeyFile: ca.Key, ClientAuth: server.ClientAuthOptional, ClientCAFile: dir + "/missing.pem"}, "missing.pem"},
	} {
		if _, err := server.New(core, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want an error with %q", tc.cfg.ClientAuth, tc.cfg.ClientCAFile, err, tc.want)
		}
	}
}

// TestUplinkClientCert: the edge's uplink client (sync/uplink) with a
// client certificate and no token delivers into the real core; with a
// certificate the hub refuses, it says so (the TLS 1.3 alert, not a
// broken pipe), counts the failures and delivers nothing.
func TestUplinkClientCert(t *testing.T) {
	h := openHub(t)
	p := testPipeline(t)
	dir := t.TempDir()
	ca, err := testcert.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(h, server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", CertFile: ca.Cert, KeyFile: ca.Key,
		ClientAuth: server.ClientAuthRequire, ClientCAFile: ca.CA, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	roots := x509.NewCertPool()
	pem, _ := os.ReadFile(ca.CA)
	roots.AppendCertsFromPEM(pem)

	run := func(t *testing.T, edge string, c testcert.Client, want func(*uplinktest.Outbox, *uplink.Uplink) bool) *uplinktest.Outbox {
		t.Helper()
		cert, key, err := testcert.WriteClient(ca, dir, edge+c.NotAfter.Format("150405"), c)
		if err != nil {
			t.Fatal(err)
		}
		files, err := edgecert.Load(cert, key, c.CommonName, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ob := uplinktest.New()
		for i, dev := range []string{"d1", "d2"} {
			ob.Add(uplink.Entry{Pipeline: "temps", Key: mustKey(t, p, dev), End: 60000, Version: 1, State: state(p, float64(i))})
		}
		up, err := uplink.New(uplink.Config{EdgeID: edge, Hub: srv.GRPCAddr().String(), BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
			TLS: &tls.Config{RootCAs: roots, GetClientCertificate: files.GetClientCertificate}, Logger: slog.New(slog.DiscardHandler)}, ob)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- up.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()
		for deadline := time.Now().Add(10 * time.Second); !want(ob, up); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("acked %d; uplink %+v", ob.Acked(), up.Stats())
			}
		}
		return ob
	}
	t.Run("expired", func(t *testing.T) {
		run(t, "gw-1", testcert.Client{CommonName: "gw-1", NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)},
			func(ob *uplinktest.Outbox, up *uplink.Uplink) bool {
				st := up.Stats()
				if ob.Acked() != 0 || st.Connected {
					t.Fatalf("an expired certificate got through: %+v", st)
				}
				return st.Reconnects >= 3 && strings.Contains(st.LastError, "the hub refused this edge's TLS client certificate") &&
					strings.Contains(st.LastError, "expired")
			})
		if es := h.Edges(); len(es) != 0 {
			t.Errorf("the hub has edges after a refused certificate: %+v", es)
		}
	})
	t.Run("good", func(t *testing.T) {
		run(t, "gw-1", testcert.Client{CommonName: "gw-1"}, func(ob *uplinktest.Outbox, _ *uplink.Uplink) bool { return ob.Acked() >= 2 })
		if es := h.Edges(); len(es) != 1 || es[0].ID != "gw-1" || es[0].AckedSeq != 2 {
			t.Errorf("hub's edges %+v, want gw-1 acked at 2", es)
		}
	})
}
