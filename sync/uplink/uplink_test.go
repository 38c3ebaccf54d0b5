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
	"google.golang.org/protobuf/proto"

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
// batches up to it. The other options make it refuse what a real hub
// refuses; everything it receives is recorded for the tests to check.
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

	limits *runnelv1.Limits // announced in every Resume
	// maxMsg > 0 is the server's MaxRecvMsgSize: gRPC ends a stream whose
	// message is larger with ResourceExhausted.
	maxMsg int
	// poison, when it returns a reason, refuses the batch holding the
	// partial with InvalidArgument and a Refusal detail naming it.
	poison    func(*runnelv1.Partial) string
	refuseAll bool // refuse every batch: InvalidArgument without detail
	// refuseSeq > 0 refuses every batch whose range holds it with a
	// Refusal naming it, whether it came as a partial or not (a hub gone
	// wrong).
	refuseSeq   uint64
	refuseHello bool // refuse every Hello: InvalidArgument
	epochAhead  bool // answer every Hello with an epoch above the one it names
	// recvDelay makes a slow hub: it waits this long before it reads each
	// batch, so the edge has sent more by the time it answers one.
	recvDelay time.Duration

	hellos   int               // Hellos received
	partials map[uint64]int    // seq -> times received as a partial, applied or refused
	batches  []recvBatch       // every batch received, in order
	applied  []uint64          // seqs of the partials applied, in order
	refusals int               // batches refused
	revs     map[uint64]uint32 // seq -> the partial's revision, when not nil
	wmRevs   map[string]int64  // "pipeline@revision" -> watermark, when not nil
}

// recvBatch is what the hub received in one batch.
type recvBatch struct {
	first, last uint64
	partials    int
	size        int // proto.Size of the SyncRequest
}

func newHub() *fakeHub {
	return &fakeHub{got: map[uint64]int{}, wm: map[string]int64{}, partials: map[uint64]int{}}
}

func (h *fakeHub) Sync(s grpc.BidiStreamingServer[runnelv1.SyncRequest, runnelv1.SyncResponse]) error {
	m, err := s.Recv()
	if err != nil {
		return err
	}
	hello := m.GetHello()
	h.mu.Lock()
	h.hellos++
	if h.partials == nil {
		h.partials = map[uint64]int{}
	}
	switch {
	case h.refuseHello:
		h.mu.Unlock()
		return status.Error(codes.InvalidArgument, "epoch refused")
	case hello.Epoch < h.fence:
		h.mu.Unlock()
		return status.Error(codes.FailedPrecondition, "fenced")
	case h.epochAhead:
		h.epoch, h.acked = hello.Epoch+1, 0
	case hello.Epoch > h.epoch:
		h.epoch, h.acked = hello.Epoch, 0
	}
	resume := &runnelv1.Resume{Epoch: h.epoch, AckedSeq: h.acked, Limits: h.limits}
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
		if h.recvDelay > 0 {
			time.Sleep(h.recvDelay)
		}
		m, err := s.Recv()
		if err != nil {
			return err
		}
		ack, err := h.apply(m)
		if err != nil {
			return err
		}
		if err := s.Send(&runnelv1.SyncResponse{Msg: &runnelv1.SyncResponse_Ack{Ack: ack}}); err != nil {
			return err
		}
	}
}

// apply records the batch m and applies it, or refuses all of it.
func (h *fakeHub) apply(m *runnelv1.SyncRequest) (*runnelv1.Ack, error) {
	b := m.GetBatch()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches = append(h.batches, recvBatch{b.FirstSeq, b.LastSeq, len(b.Partials), proto.Size(m)})
	if b.Epoch != h.epoch || b.FirstSeq > h.acked+1 && h.acked > 0 {
		return nil, status.Errorf(codes.OutOfRange, "batch %d-%d after %d", b.FirstSeq, b.LastSeq, h.acked)
	}
	var refused runnelv1.Refusal
	prev := b.FirstSeq - 1
	for _, p := range b.Partials {
		h.partials[p.Seq]++
		if p.Seq <= prev || p.Seq > b.LastSeq {
			return nil, status.Errorf(codes.InvalidArgument, "partial %d out of order in batch %d-%d", p.Seq, b.FirstSeq, b.LastSeq)
		}
		prev = p.Seq
		if h.poison != nil {
			if why := h.poison(p); why != "" {
				refused.Entries = append(refused.Entries, &runnelv1.RefusedEntry{Seq: p.Seq, Reason: why})
			}
		}
	}
	if h.refuseSeq >= b.FirstSeq && h.refuseSeq <= b.LastSeq {
		refused.Entries = append(refused.Entries, &runnelv1.RefusedEntry{Seq: h.refuseSeq, Reason: "stuck"})
	}
	switch {
	case h.refuseAll:
		h.refusals++
		return nil, status.Error(codes.InvalidArgument, "batches refused")
	case len(refused.Entries) > 0:
		h.refusals++
		st, err := status.New(codes.InvalidArgument, "partials refused").WithDetails(&refused)
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	for _, p := range b.Partials {
		if p.Seq > h.acked {
			h.got[p.Seq]++
			h.applied = append(h.applied, p.Seq)
		}
	}
	for _, p := range b.Partials {
		if h.revs != nil {
			h.revs[p.Seq] = p.Revision
		}
	}
	for _, w := range b.Watermarks {
		h.wm[w.Pipeline] = max(h.wm[w.Pipeline], w.WatermarkMs)
		if h.wmRevs != nil {
			h.wmRevs[fmt.Sprintf("%s@%d", w.Pipeline, w.Revision)] = max(h.wmRevs[fmt.Sprintf("%s@%d", w.Pipeline, w.Revision)], w.WatermarkMs)
		}
	}
	h.acked = max(h.acked, b.LastSeq)
	return &runnelv1.Ack{Epoch: h.epoch, AckedSeq: h.acked}, nil
}

func (h *fakeHub) set(fn func(h *fakeHub)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn(h)
}

func (h *fakeHub) count(fn func(h *fakeHub) int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fn(h)
}

func serve(t *testing.T, h *fakeHub) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if h.maxMsg > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(h.maxMsg))
	}
	srv := grpc.NewServer(opts...)
	runnelv1.RegisterUplinkServer(srv, h)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

func start(t *testing.T, addr string, ob uplink.Outbox) (*uplink.Uplink, func()) {
	t.Helper()
	return startWith(t, addr, ob, nil)
}

// startWith runs an uplink of the tests' config, changed by fn, until
// the returned stop; Run must return nil then.
func startWith(t *testing.T, addr string, ob uplink.Outbox, fn func(*uplink.Config)) (*uplink.Uplink, func()) {
	t.Helper()
	cfg := uplink.Config{EdgeID: "e1", Hub: addr, Insecure: true, BatchEntries: 7, MaxUnacked: 50,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}
	if fn != nil {
		fn(&cfg)
	}
	u, err := uplink.New(cfg, ob)
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

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkDelivered fails unless the hub applied every partial of es once,
// in order, except those of skip, which it must not have applied.
func checkDelivered(t *testing.T, h *fakeHub, es []uplink.Entry, skip map[uint64]bool) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, e := range es {
		seq := uint64(i + 1)
		switch {
		case e.Marker:
			if h.got[seq] != 0 {
				t.Errorf("marker %d applied as a partial", seq)
			}
		case skip[seq]:
			if h.got[seq] != 0 {
				t.Errorf("set-aside entry %d applied %d times", seq, h.got[seq])
			}
		case h.got[seq] != 1:
			t.Errorf("entry %d applied %d times, want 1", seq, h.got[seq])
		}
	}
	for i := 1; i < len(h.applied); i++ {
		if h.applied[i] <= h.applied[i-1] {
			t.Fatalf("applied %d after %d", h.applied[i], h.applied[i-1])
		}
	}
}

// TestRevisionsSent: partials and watermark markers carry their pipeline
// revision; one batch can hold the last marker of one revision and the
// first of the next, and both arrive.
func TestRevisionsSent(t *testing.T) {
	h := newHub()
	h.revs, h.wmRevs = map[uint64]uint32{}, map[string]int64{}
	ob := uplinktest.New()
	ob.Add(
		uplink.Entry{Pipeline: "p", Revision: 1, Key: []byte("k"), Start: 0, End: 10, Version: 1, State: []byte{1}},
		uplink.Entry{Pipeline: "p", Revision: 1, Marker: true, Watermark: 10},
		uplink.Entry{Pipeline: "p", Revision: 2, Key: []byte("k"), Start: 10, End: 20, Version: 1, State: []byte{1}},
		uplink.Entry{Pipeline: "p", Revision: 2, Marker: true, Watermark: 5},
		uplink.Entry{Pipeline: "q", Key: []byte("k"), Start: 0, End: 10, Version: 1, State: []byte{1}},
	)
	_, stop := start(t, serve(t, h), ob)
	waitAcked(t, ob, 5)
	stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.revs[1] != 1 || h.revs[3] != 2 || h.revs[5] != 0 {
		t.Errorf("revisions received %v, want 1:1 3:2 5:0", h.revs)
	}
	if h.wmRevs["p@1"] != 10 || h.wmRevs["p@2"] != 5 {
		t.Errorf("watermarks received %v, want p@1 10 and p@2 5", h.wmRevs)
	}
}
