package server_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/runnel-io/runnel/hub/server"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// TestReloadEdgeTokens: a reload lets an edge added in at once, ends the
// open streams of a token removed or changed (Unauthenticated) and keeps
// them out, leaves the other edges' streams alone, and a refused set of
// tokens changes nothing.
func TestReloadEdgeTokens(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, nil) // gw-1: token-1, gw-2: token-2
	ctx := testCtx(t)
	up := runnelv1.NewUplinkClient(e.edge)
	openUplink := func(tok, edge string) (runnelv1.Uplink_SyncClient, error) {
		s, err := up.Sync(withToken(ctx, tok))
		if err != nil {
			t.Fatal(err)
		}
		s.Send(hello(edge, 1, 1))
		_, err = s.Recv()
		return s, err
	}
	u1, err := openUplink("token-1", "gw-1")
	if err != nil {
		t.Fatal(err)
	}
	u2, err := openUplink("token-2", "gw-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openUplink("token-3-xxxxxxxx", "gw-3"); err == nil {
		t.Fatal("gw-3 came in before it had a token")
	}
	ctl1 := connect(t, e, ff, ctx, "token-1", "gw-1")

	// gw-1 removed, gw-3 added, gw-2 unchanged.
	r, err := e.srv.ReloadEdgeTokens(func() (map[string]string, error) {
		return map[string]string{"gw-2": "token-2", "gw-3": "token-3-xxxxxxxx"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r != (server.TokensReload{Edges: 2, Added: 1, Removed: 1, StreamsEnded: 2}) {
		t.Errorf("reload %+v", r)
	}
	wantCode(t, recvErr(u1), codes.Unauthenticated, "gw-1's uplink after its token went")
	_, err = ctl1.Recv()
	for err == nil {
		_, err = ctl1.Recv()
	}
	wantCode(t, err, codes.Unauthenticated, "gw-1's control stream after its token went")
	if _, err := openUplink("token-1", "gw-1"); err == nil {
		t.Error("gw-1 came back with its revoked token")
	}
	if _, err := openUplink("token-3-xxxxxxxx", "gw-3"); err != nil {
		t.Errorf("gw-3 after its token came: %v", err)
	}
	if err := u2.Send(&runnelv1.SyncRequest{Msg: &runnelv1.SyncRequest_Batch{Batch: &runnelv1.Batch{EdgeId: "gw-2", Epoch: 1, FirstSeq: 1, LastSeq: 1}}}); err != nil {
		t.Errorf("gw-2's uplink after the reload: %v", err)
	}

	// gw-2's token changed: its stream ends.
	if r, err := e.srv.ReloadEdgeTokens(func() (map[string]string, error) {
		return map[string]string{"gw-2": "token-2-new-yyyyy", "gw-3": "token-3-xxxxxxxx"}, nil
	}); err != nil || r.Changed != 1 || r.StreamsEnded != 1 {
		t.Errorf("reload of gw-2's new token: %+v %v", r, err)
	}
	wantCode(t, recvErr(u2), codes.Unauthenticated, "gw-2's uplink after its token changed")

	// Refused: two edges with one token, and a read that fails.
	for _, read := range []func() (map[string]string, error){
		func() (map[string]string, error) {
			return map[string]string{"a": "same-token-zzzzzz", "b": "same-token-zzzzzz"}, nil
		},
		func() (map[string]string, error) { return nil, errors.New("tokens: line 3: nonsense") },
	} {
		if _, err := e.srv.ReloadEdgeTokens(read); err == nil {
			t.Error("a bad set of tokens was taken")
		}
	}
	if _, err := openUplink("token-3-xxxxxxxx", "gw-3"); err != nil {
		t.Errorf("gw-3 after refused reloads: %v", err)
	}
	_, metrics := e.get(t, "/metrics", "")
	for _, want := range []string{`runnel_hub_edge_tokens_reloads_total{result="ok"} 2`, `runnel_hub_edge_tokens_reloads_total{result="failed"} 2`, "runnel_hub_edge_tokens 2"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
