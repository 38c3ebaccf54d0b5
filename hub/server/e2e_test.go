package server_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/sync/uplink/uplinktest"
)

// TestEdgeUplinkToHub: the edge's uplink client (sync/uplink) drains an
// outbox over TLS with its token into the real core, which merges it.
func TestEdgeUplinkToHub(t *testing.T) {
	h := openHub(t)
	p := testPipeline(t)
	e := start(t, h, nil)

	ob := uplinktest.New()
	for i, dev := range []string{"d1", "d2", "d3"} {
		ob.Add(uplink.Entry{Pipeline: "temps", Key: mustKey(t, p, dev), End: 60000, Version: 1, State: state(p, float64(i))})
	}
	ob.Add(uplink.Entry{Pipeline: "temps", Marker: true, Watermark: 60000})

	up, err := uplink.New(uplink.Config{EdgeID: "gw-1", Hub: e.srv.GRPCAddr().String(), Token: "token-1", TLS: &tls.Config{RootCAs: e.pool}}, ob)
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
	for deadline := time.Now().Add(10 * time.Second); ob.Acked() < 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("acked %d of 4; uplink %+v", ob.Acked(), up.Stats())
		}
	}
	rs, _, err := h.Query(hub.Query{Pipeline: "temps"})
	if err != nil || len(rs) != 3 {
		t.Fatalf("results: %d %v", len(rs), err)
	}
}
