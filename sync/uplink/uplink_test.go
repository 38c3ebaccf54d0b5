package uplink_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/sync/uplink/uplinktest"
)

// These tests run the uplink against a small hub written here (real gRPC
// over loopback, an in-memory apply). The real hub is tested with the
// uplink in the end-to-end tests.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeHub applies batches in order per (edge, epoch) and acks each one.
// failEvery > 0 ends a stream with Unavailable after a random number of
// batches up to it.
type fakeHub struct {
	runnelv1.UnimplementedUplinkServer
	mu        sync.Mutex
	epoch     uint64
	acked     uint64
	got       map[uint64]int // seq -> times applied (partials and markers)
	wm        map[string]int64
	failEvery int
	fails     int
	fence     uint64 // refuse epochs below this
}

func (h *fakeHub) Sync(s grpc.BidiStreamingServer[runnelv1.SyncRequest, runnelv1.SyncResponse]) error {
	m, err := s.Recv()
	if err != nil {
		return err
	}
	hello := m.GetHello()
	h.mu.Lock()
	if hello.Epoch < h.fence {
		h.mu.Unlock()
		return status.Error(codes.FailedPrecondition, "fenced")
	}
	if hello.Epoch > h.epoch {
		h.epoch, h.acked = hello.Epoch, 0
	}
	resume := &runnelv1.Resume{Epoch: h.epoch, AckedSeq: h.acked}
	budget := 0
	if h.failEvery > 0 {
		budget = 1 + rand.IntN(h.failEvery)
	}
	h.mu.Unlock()
	if err := s.Send(&runnelv1.SyncResponse{Msg: &runnelv1.SyncResponse_Resume{Resume: resume}}); err != nil {
		return err
	}
	for n := 0; ; n++ {
		if budget > 0 && n == budget {
			h.mu.Lock()
			h.fails++
			h.mu.Unlock()
			return status.Error(codes.Unavailable, "injected")
		}
		m, err := s.Recv()
		if err != nil {
			return err
		}
		b := m.GetBatch()
		h.mu.Lock()
		if b.Epoch != h.epoch || b.FirstSeq > h.acked+1 && h.acked > 0 {
			h.mu.Unlock()
			return status.Errorf(codes.OutOfRange, "batch %d-%d after %d", b.FirstSeq, b.LastSeq, h.acked)
		}
		for _, p := range b.Partials {
			if p.Seq > h.acked {
				h.got[p.Seq]++
			}
		}
		for _, w := range b.Watermarks {
			h.wm[w.Pipeline] = max(h.wm[w.Pipeline], w.WatermarkMs)
		}
		h.acked = max(h.acked, b.LastSeq)
		ack := &runnelv1.Ack{Epoch: h.epoch, AckedSeq: h.acked}
		h.mu.Unlock()
		if err := s.Send(&runnelv1.SyncResponse{Msg: &runnelv1.SyncResponse_Ack{Ack: ack}}); err != nil {
			return err
		}
	}
}

func serve(t *testing.T, h *fakeHub) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runnelv1.RegisterUplinkServer(srv, h)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

func start(t *testing.T, addr string, ob uplink.Outbox) (*uplink.Uplink, func()) {
	t.Helper()
	u, err := uplink.New(uplink.Config{EdgeID: "e1", Hub: addr, Insecure: true, BatchEntries: 7, MaxUnacked: 50,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}, ob)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	return u, func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func entries(n int) []uplink.Entry {
	var es []uplink.Entry
	for i := range n {
		if i%10 == 9 {
			es = append(es, uplink.Entry{Pipeline: "p", Marker: true, Watermark: int64(i)})
			continue
		}
		es = append(es, uplink.Entry{Pipeline: "p", Key: []byte(fmt.Sprint("k", i)), Start: int64(i), End: int64(i + 10),
			Version: 1, State: []byte{1, 2, 3}})
	}
	return es
}

func waitAcked(t *testing.T, ob *uplinktest.Outbox, seq uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := ob.Acked()
		if a >= seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("acked %d, want %d", a, seq)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDrainsThroughFailures: the hub ends streams at random; every entry
// is applied exactly once, in order, and the outbox is acked to the end,
// also for entries committed while the uplink runs.
func TestDrainsThroughFailures(t *testing.T) {
	h := &fakeHub{got: map[uint64]int{}, wm: map[string]int64{}, failEvery: 4}
	ob := uplinktest.New()
	es := entries(1000)
	ob.Add(es[:400]...)
	u, stop := start(t, serve(t, h), ob)
	for i := 400; i < len(es); i += 50 {
		ob.Add(es[i : i+50]...)
		time.Sleep(time.Millisecond)
	}
	waitAcked(t, ob, uint64(len(es)))
	stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, e := range es {
		want := 1
		if e.Marker {
			want = 0
		}
		if h.got[uint64(i+1)] != want {
			t.Fatalf("entry %d applied %d times, want %d", i+1, h.got[uint64(i+1)], want)
		}
	}
	if h.wm["p"] != 999 {
		t.Errorf("hub watermark %d, want 999", h.wm["p"])
	}
	st := u.Stats()
	if h.fails == 0 || st.Reconnects == 0 {
		t.Errorf("no failure injected (fails %d, reconnects %d)", h.fails, st.Reconnects)
	}
	t.Logf("%d entries through %d injected stream failures, %d batches", len(es), h.fails, st.Batches)
}

// TestNewEpochWhenHubKnowsMore: an edge restored from an older copy (the
// hub acked past what it committed) starts a new epoch and resends.
func TestNewEpochWhenHubKnowsMore(t *testing.T) {
	h := &fakeHub{got: map[uint64]int{}, wm: map[string]int64{}, epoch: 1, acked: 500}
	ob := uplinktest.New()
	ob.Add(entries(100)...)
	u, stop := start(t, serve(t, h), ob)
	waitAcked(t, ob, 100)
	stop()
	if e := ob.Epoch(); e != 2 {
		t.Fatalf("epoch %d, want 2", e)
	}
	if u.Stats().NewEpochs != 1 {
		t.Errorf("new epochs %d, want 1", u.Stats().NewEpochs)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.epoch != 2 || len(h.got) != 90 {
		t.Errorf("hub epoch %d with %d partials, want 2 and 90", h.epoch, len(h.got))
	}
}

// TestFencedEpochMovesOn: a fenced epoch is replaced by the next one.
func TestFencedEpochMovesOn(t *testing.T) {
	h := &fakeHub{got: map[uint64]int{}, wm: map[string]int64{}, epoch: 3, fence: 3}
	ob := uplinktest.New()
	ob.Add(entries(20)...)
	_, stop := start(t, serve(t, h), ob)
	waitAcked(t, ob, 20)
	stop()
	if e := ob.Epoch(); e != 3 {
		t.Fatalf("epoch %d, want 3", e)
	}
}

// TestOutboxStartingFarAhead: the hub has nothing of this epoch and the
// outbox starts far past sequence 1 (earlier entries were acked and
// deleted, e.g. under the previous epoch): everything in it is sent,
// though it lies beyond MaxUnacked of sequence 0.
func TestOutboxStartingFarAhead(t *testing.T) {
	h := &fakeHub{got: map[uint64]int{}, wm: map[string]int64{}}
	ob := uplinktest.New()
	es := entries(50_100)
	ob.Add(es...)
	ob.DeleteThrough(50_000)
	_, stop := start(t, serve(t, h), ob)
	waitAcked(t, ob, uint64(len(es)))
	stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for seq := uint64(50_001); seq <= uint64(len(es)); seq++ {
		if !es[seq-1].Marker {
			n++
			if h.got[seq] != 1 {
				t.Fatalf("entry %d applied %d times", seq, h.got[seq])
			}
		}
	}
	if len(h.got) != n {
		t.Fatalf("hub got %d partials, want %d", len(h.got), n)
	}
}
