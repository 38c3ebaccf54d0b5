package objstore

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// While an upload runs, the stats show it in flight with its pending bytes
// and its age on the Bucket's clock; the collector exports the same.
func TestStatsInFlight(t *testing.T) {
	clock := newFakeClock()
	b, _ := openFake(t, func(c *Config) {
		c.BandwidthLimit = 1 << 20 // 2 MiB: about 2 s
		c.Clock = clock
	})
	data := randBytes(19, 2<<20)
	done := make(chan error, 1)
	go func() { done <- b.Put(context.Background(), "slow", bytes.NewReader(data), int64(len(data))) }()
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().UploadsInFlight == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the upload never showed in flight")
		}
		time.Sleep(time.Millisecond)
	}
	s := b.Stats()
	if s.UploadsInFlight != 1 || s.PendingBytes != int64(len(data)) || !s.OldestUpload.Equal(clock.Now()) {
		t.Fatalf("in flight: %+v", s)
	}
	clock.mu.Lock()
	clock.now = clock.now.Add(42 * time.Second)
	clock.mu.Unlock()
	reg := prometheus.NewRegistry()
	reg.MustRegister(b.Collector("runnel_edge", prometheus.Labels{"store": "snapshots"}))
	want := `
# HELP runnel_edge_objstore_oldest_upload_age_seconds Age of the longest-running upload in flight; 0 when none runs.
# TYPE runnel_edge_objstore_oldest_upload_age_seconds gauge
runnel_edge_objstore_oldest_upload_age_seconds{store="snapshots"} 42
# HELP runnel_edge_objstore_uploads_in_flight Uploads running (sending, waiting on the bandwidth cap, or between retries).
# TYPE runnel_edge_objstore_uploads_in_flight gauge
runnel_edge_objstore_uploads_in_flight{store="snapshots"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "runnel_edge_objstore_oldest_upload_age_seconds", "runnel_edge_objstore_uploads_in_flight"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s = b.Stats()
	if s.UploadsInFlight != 0 || s.PendingBytes != 0 || !s.OldestUpload.IsZero() || s.UploadedBytes != int64(len(data)) || s.UploadedObjects != 1 {
		t.Fatalf("after: %+v", s)
	}
}

// Every metric is there, every failure cause with it, and the counters
// follow the operations.
func TestCollector(t *testing.T) {
	m := NewMem()
	ctx := context.Background()
	m.Put(ctx, "a", strings.NewReader("abc"), 3)
	m.Put(ctx, "a", strings.NewReader("abc"), 3) // exists
	m.Get(ctx, "missing")                        // not found
	r, _ := m.Get(ctx, "a")
	r.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector("runnel_hub", nil))
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	if want := 5 + len(causes) + 3; n != want {
		t.Fatalf("%d series, want %d", n, want)
	}
	want := `
# HELP runnel_hub_objstore_failures_total Failed object store operations by cause (retryable: gave up after retries; access: credentials or permissions; no_bucket; tls; exists; not_found; canceled; corrupt; other).
# TYPE runnel_hub_objstore_failures_total counter
runnel_hub_objstore_failures_total{cause="access"} 0
runnel_hub_objstore_failures_total{cause="canceled"} 0
runnel_hub_objstore_failures_total{cause="corrupt"} 0
runnel_hub_objstore_failures_total{cause="exists"} 1
runnel_hub_objstore_failures_total{cause="no_bucket"} 0
runnel_hub_objstore_failures_total{cause="not_found"} 1
runnel_hub_objstore_failures_total{cause="other"} 0
runnel_hub_objstore_failures_total{cause="retryable"} 0
runnel_hub_objstore_failures_total{cause="tls"} 0
# HELP runnel_hub_objstore_uploaded_bytes_total Payload bytes the object store acknowledged.
# TYPE runnel_hub_objstore_uploaded_bytes_total counter
runnel_hub_objstore_uploaded_bytes_total 3
# HELP runnel_hub_objstore_uploaded_objects_total Objects created in the object store.
# TYPE runnel_hub_objstore_uploaded_objects_total counter
runnel_hub_objstore_uploaded_objects_total 1
# HELP runnel_hub_objstore_downloaded_bytes_total Bytes read from the object store.
# TYPE runnel_hub_objstore_downloaded_bytes_total counter
runnel_hub_objstore_downloaded_bytes_total 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"runnel_hub_objstore_failures_total", "runnel_hub_objstore_uploaded_bytes_total",
		"runnel_hub_objstore_uploaded_objects_total", "runnel_hub_objstore_downloaded_bytes_total"); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(m.Collector("runnel_hub", nil))
	if err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
}

// Mem's fault injection: a chosen class for a chosen call.
func TestMemFault(t *testing.T) {
	m := NewMem()
	ctx := context.Background()
	m.SetFault(func(op, key string) error {
		switch {
		case op == "put" && key == "flaky":
			return &Error{Op: op, Bucket: "mem", Key: key, Cause: CauseRetryable, Status: 503}
		case op == "get":
			return errors.New("disk on fire")
		}
		return nil
	})
	if err := m.Put(ctx, "flaky", strings.NewReader("x"), 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("put: %v", err)
	}
	if err := m.Put(ctx, "fine", strings.NewReader("x"), 1); err != nil {
		t.Fatalf("put: %v", err)
	}
	_, err := m.Get(ctx, "fine")
	var e *Error
	if !errors.As(err, &e) || e.Cause != CauseOther || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("get: %v", err)
	}
	m.SetFault(nil)
	if got := mustGet(t, m, "fine"); string(got) != "x" {
		t.Fatalf("get: %q", got)
	}
	if s := m.Stats(); s.Failures[CauseRetryable] != 1 || s.Failures[CauseOther] != 1 {
		t.Fatalf("stats %+v", s)
	}
}
