package uplink_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/sync/uplink/uplinktest"
)

var errStopping = errors.New("outbox: the node is stopping")

// stoppingOutbox fails SetEpoch and Quarantine, as an edge's outbox does
// once its writer has stopped. shutdown, if set, runs first: the node's
// shutdown, which cancels Run's context before its writer stops.
type stoppingOutbox struct {
	*uplinktest.Outbox
	shutdown func()
}

func (o *stoppingOutbox) fail() error {
	if o.shutdown != nil {
		o.shutdown()
	}
	return errStopping
}

func (o *stoppingOutbox) SetEpoch(uint64) error             { return o.fail() }
func (o *stoppingOutbox) Quarantine([]uplink.Refused) error { return o.fail() }

// TestOutboxFailure: when the outbox cannot store a new epoch or a
// quarantine, Run returns the outbox's error, since retrying the hub
// cannot fix it; but if its context is done by then (the node is
// shutting down, which is why the outbox stopped), Run returns nil.
func TestOutboxFailure(t *testing.T) {
	triggers := []struct {
		name string
		hub  func(h *fakeHub)
	}{
		{"SetEpoch", func(h *fakeHub) { h.epoch = 5 }},
		{"Quarantine/refusal", func(h *fakeHub) {
			h.poison = func(p *runnelv1.Partial) string {
				if p.Seq == 3 {
					return "poison"
				}
				return ""
			}
		}},
		{"Quarantine/limits", func(h *fakeHub) { h.limits = &runnelv1.Limits{MaxKeyBytes: 1} }},
	}
	for _, tr := range triggers {
		for _, shutdown := range []bool{false, true} {
			name := tr.name + "/running"
			if shutdown {
				name = tr.name + "/shutting-down"
			}
			t.Run(name, func(t *testing.T) {
				h := newHub()
				tr.hub(h)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				ob := &stoppingOutbox{Outbox: uplinktest.New()}
				if shutdown {
					ob.shutdown = cancel
				}
				ob.Add(entries(20)...)
				u, err := uplink.New(uplink.Config{EdgeID: "e1", Hub: serve(t, h), Insecure: true,
					BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, ob)
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- u.Run(ctx) }()
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					cancel()
					<-done
					t.Fatal("Run did not return when its outbox failed")
				}
				switch {
				case shutdown && err != nil:
					t.Errorf("Run returned %v during a shutdown", err)
				case !shutdown && !errors.Is(err, errStopping):
					t.Errorf("Run returned %v, want the outbox's error", err)
				case !shutdown && !strings.HasPrefix(err.Error(), "uplink: "):
					t.Errorf("Run's error %q does not say where", err)
				}
			})
		}
	}
}
