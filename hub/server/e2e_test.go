package server_test

import (
	"context"
	"crypto/tls"
	"sync"
	"testing"
	"time"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/sync/uplink"
)

// memOutbox is a committed outbox in memory, for the edge's uplink.
type memOutbox struct {
	mu      sync.Mutex
	entries []uplink.Entry // entries[i].Seq == i+1
	epoch   uint64
	acked   uint64
	grew    chan struct{}
}

func (o *memOutbox) Committed() (uint64, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return uint64(len(o.entries)) + 1, o.grew
}

func (o *memOutbox) Read(from uint64, fn func(*uplink.Entry) bool) error {
	o.mu.Lock()
	es := o.entries
	o.mu.Unlock()
	for i := from; i >= 1 && i <= uint64(len(es)); i++ {
		if !fn(&es[i-1]) {
			break
		}
	}
	return nil
}

func (o *memOutbox) Epoch() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.epoch
}

func (o *memOutbox) SetEpoch(e uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.epoch = e
	return nil
}

func (o *memOutbox) Ack(seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acked = max(o.acked, seq)
}

func (o *memOutbox) ackedSeq() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acked
}

// TestEdgeUplinkToHub: the edge's uplink client (sync/uplink) drains an
// outbox over TLS with its token into the real core, which merges it.
func TestEdgeUplinkToHub(t *testing.T) {
	h := openHub(t)
	p := testPipeline(t)
	e := start(t, h, nil)

	ob := &memOutbox{epoch: 1, grew: make(chan struct{})}
	for i, dev := range []string{"d1", "d2", "d3"} {
		ob.entries = append(ob.entries, uplink.Entry{Seq: uint64(i + 1), Pipeline: "temps", Key: mustKey(t, p, dev), End: 60000, Version: 1, State: state(p, float64(i))})
	}
	ob.entries = append(ob.entries, uplink.Entry{Seq: 4, Pipeline: "temps", Marker: true, Watermark: 60000})

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
	for deadline := time.Now().Add(10 * time.Second); ob.ackedSeq() < 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("acked %d of 4; uplink %+v", ob.ackedSeq(), up.Stats())
		}
	}
	rs, _, err := h.Query(hub.Query{Pipeline: "temps"})
	if err != nil || len(rs) != 3 {
		t.Fatalf("results: %d %v", len(rs), err)
	}
}
