package uplink_test

import (
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/sync/uplink/uplinktest"
)

// TestReconnectWithinBackoffMax: after a long outage the uplink notices the
// hub's return within its own back-off cap. The hub is down for 20 s
// (BackoffMax 500ms), then listens on its address again: the outbox must be
// acked within 2.5 s. grpc-go has a reconnect back-off of its own, by default
// growing to 120 s (±20 %), during which every new stream fails at once with
// the last dial error; left at its default it was 6–11 s into its back-off
// after these 20 s, and after a week offline the edge kept sending nothing for
// up to 2 minutes beyond the uplink's 30 s cap.
func TestReconnectWithinBackoffMax(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20 s outage")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // down
	ob := uplinktest.New()
	ob.Add(entries(100)...)
	_, stop := startWith(t, addr, ob, func(c *uplink.Config) {
		c.BackoffMin, c.BackoffMax = 10*time.Millisecond, 500*time.Millisecond
	})
	defer stop()
	time.Sleep(20 * time.Second)

	if ln, err = net.Listen("tcp", addr); err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runnelv1.RegisterUplinkServer(srv, newHub())
	go srv.Serve(ln)
	defer srv.Stop()
	back := time.Now()
	deadline := back.Add(2500 * time.Millisecond)
	for ob.Acked() < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("the hub has been back for %v and the uplink has not delivered (acked %d of 100)", time.Since(back).Round(time.Millisecond), ob.Acked())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("delivered %v after the hub came back", time.Since(back).Round(time.Millisecond))
}
