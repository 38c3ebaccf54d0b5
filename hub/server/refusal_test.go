package server_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/hub"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// refusalOf returns the Refusal detail of err, or nil.
func refusalOf(err error) *runnelv1.Refusal {
	for _, d := range status.Convert(err).Details() {
		if r, ok := d.(*runnelv1.Refusal); ok {
			return r
		}
	}
	return nil
}

// TestRefusalDetail: against the real core, a batch with bad partials
// ends the stream with InvalidArgument and a Refusal detail naming each
// of them; the Resume announces the hub's limits; the batch resent without
// the refused entries is applied and acked; the refusal is counted in
// /metrics.
func TestRefusalDetail(t *testing.T) {
	h := openHub(t)
	p := testPipeline(t)
	e := start(t, h, nil)
	up := runnelv1.NewUplinkClient(e.edge)
	ctx := withToken(testCtx(t), "token-1")
	good := &runnelv1.Partial{Seq: 1, Pipeline: "temps", Key: mustKey(t, p, "d1"), WindowEnd: 60000, Version: 1, State: state(p, 20)}
	longKey := &runnelv1.Partial{Seq: 2, Pipeline: "temps", Key: make([]byte, hub.MaxKeyBytes+1), WindowEnd: 60000, Version: 1, State: state(p, 20)}
	badState := &runnelv1.Partial{Seq: 3, Pipeline: "temps", Key: mustKey(t, p, "d2"), WindowEnd: 60000, Version: 1, State: []byte{0xee}}
	sync := func(b *runnelv1.Batch) (*runnelv1.Resume, error) {
		s, err := up.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Send(hello("gw-1", 1, 4))
		m, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		s.Send(batch(b))
		for {
			m2, err := s.Recv()
			if err != nil {
				return m.GetResume(), err
			}
			if a := m2.GetAck(); a != nil && a.AckedSeq == b.LastSeq {
				s.CloseSend()
				return m.GetResume(), recvErr(s)
			}
		}
	}
	resume, err := sync(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 3, Partials: []*runnelv1.Partial{good, longKey, badState}})
	wantCode(t, err, codes.InvalidArgument, "batch with bad partials")
	l := resume.GetLimits()
	if l.GetMaxKeyBytes() != hub.MaxKeyBytes || l.GetMaxStateBytes() != hub.MaxStateBytes || l.GetMaxBatchPartials() != hub.MaxBatchPartials ||
		l.GetMaxBatchBytes() == 0 || l.GetMaxBatchBytes() >= 16<<20 {
		t.Errorf("limits %v", l)
	}
	r := refusalOf(err)
	if r == nil || len(r.Entries) != 2 || r.Entries[0].Seq != 2 || !strings.Contains(r.Entries[0].Reason, "key of") ||
		r.Entries[1].Seq != 3 || !strings.Contains(r.Entries[1].Reason, "does not decode") {
		t.Fatalf("refusal %v (%v)", r, err)
	}
	if _, err := sync(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 3, Partials: []*runnelv1.Partial{good}}); !errors.Is(err, io.EOF) {
		t.Fatalf("resend without the refused entries: %v", err)
	}
	if ed := h.Edges(); len(ed) != 1 || ed[0].AckedSeq != 3 {
		t.Fatalf("edges %+v", ed)
	}
	_, body := e.get(t, "/metrics", "")
	for _, want := range []string{"runnel_hub_batches_refused_total 1", "runnel_hub_partials_refused_total 2", "runnel_hub_watermarks_clamped_total 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics: missing %q in\n%s", want, grepLines(body, "refused"))
		}
	}
}

// TestRefusalDetailBounded: a refusal of many entries with long reasons
// names the first 1000, with reasons cut to 256 bytes.
func TestRefusalDetailBounded(t *testing.T) {
	p := testPipeline(t)
	core := newFakeCore(p)
	re := &hub.RefusedError{Edge: "gw-1", Epoch: 1}
	for i := range 1500 {
		re.Entries = append(re.Entries, hub.Refused{Seq: uint64(i + 1), Reason: fmt.Sprintf("%d: %s", i, strings.Repeat("é", 300))})
	}
	core.applyErr = re
	e := start(t, core, nil)
	s, err := runnelv1.NewUplinkClient(e.edge).Sync(withToken(testCtx(t), "token-1"))
	if err != nil {
		t.Fatal(err)
	}
	s.Send(hello("gw-1", 1, 1))
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	s.Send(batch(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 1500}))
	err = recvErr(s)
	wantCode(t, err, codes.InvalidArgument, "refusal")
	r := refusalOf(err)
	if r == nil || len(r.Entries) != 1000 || r.Entries[999].Seq != 1000 {
		t.Fatalf("refusal of %d entries", len(r.GetEntries()))
	}
	for _, en := range r.Entries {
		if len(en.Reason) > 256 || !strings.HasSuffix(en.Reason, "...") {
			t.Fatalf("reason of %d bytes: %q", len(en.Reason), en.Reason)
		}
	}
}

// TestEpochCodes: against the real core, a Hello with an older epoch gets
// the hub's in its Resume; one too far ahead is InvalidArgument; a batch
// of the older epoch is FailedPrecondition.
func TestEpochCodes(t *testing.T) {
	h := openHub(t)
	e := start(t, h, nil)
	up := runnelv1.NewUplinkClient(e.edge)
	ctx := withToken(testCtx(t), "token-1")
	open := func(epoch uint64) (grpc.BidiStreamingClient[runnelv1.SyncRequest, runnelv1.SyncResponse], *runnelv1.Resume, error) {
		s, err := up.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Send(hello("gw-1", epoch, 1))
		m, err := s.Recv()
		return s, m.GetResume(), err
	}
	s, r, err := open(5)
	if err != nil || r.Epoch != 5 {
		t.Fatalf("Hello 5: %v %v", r, err)
	}
	s.CloseSend()
	recvErr(s)
	s, r, err = open(3)
	if err != nil || r.Epoch != 5 {
		t.Fatalf("Hello 3: %v %v, want the hub's epoch 5", r, err)
	}
	s.Send(batch(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 3, FirstSeq: 1, LastSeq: 1}))
	wantCode(t, recvErr(s), codes.FailedPrecondition, "batch of an older epoch")
	_, _, err = open(5 + hub.MaxEpochStep + 1)
	wantCode(t, err, codes.InvalidArgument, "Hello too far ahead")
	if st := h.Status(); st.EpochsRefused != 1 {
		t.Fatalf("epochs refused %d", st.EpochsRefused)
	}
}

// TestUnknownPipelineParked: against the real core, a batch with a
// partial of a pipeline the hub does not know is acked (the partial is
// parked), the known pipeline's partial of it merges, and /metrics shows
// what is parked.
func TestUnknownPipelineParked(t *testing.T) {
	h := openHub(t)
	p := testPipeline(t)
	e := start(t, h, nil)
	s, err := runnelv1.NewUplinkClient(e.edge).Sync(withToken(testCtx(t), "token-1"))
	if err != nil {
		t.Fatal(err)
	}
	s.Send(hello("gw-1", 1, 1))
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	s.Send(batch(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 2, Partials: []*runnelv1.Partial{
		{Seq: 1, Pipeline: "temps", Key: mustKey(t, p, "d1"), WindowEnd: 60000, Version: 1, State: state(p, 20)},
		{Seq: 2, Pipeline: "nope", Key: []byte("k"), WindowEnd: 60000, Version: 1, State: []byte{1}}},
		Watermarks: []*runnelv1.Watermark{{Pipeline: "temps", WatermarkMs: 60000}, {Pipeline: "nope", WatermarkMs: 60000}}}))
	for {
		m, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if a := m.GetAck(); a != nil && a.AckedSeq == 2 {
			break
		}
	}
	s.CloseSend()
	recvErr(s)
	_, body := e.get(t, "/metrics", "")
	for _, want := range []string{"runnel_hub_partials_parked_total 1", `runnel_hub_parked_partials{pipeline="nope"} 1`,
		`runnel_hub_parked_bytes{pipeline="nope"}`, "runnel_hub_partials_total 1", "runnel_hub_batches_refused_total 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics: missing %q in\n%s", want, grepLines(body, "runnel_hub_"))
		}
	}
}
