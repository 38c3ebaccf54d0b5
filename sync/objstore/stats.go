package objstore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats is a snapshot of a Bucket's (or a Mem's) counters since it was
// made.
type Stats struct {
	UploadedBytes   int64 // payload bytes the server acknowledged (whole objects and parts)
	UploadedObjects int64 // objects created
	DownloadedBytes int64
	Retries         int64 // requests repeated after a retryable failure, and downloads resumed
	ResumedParts    int64 // parts of earlier, interrupted uploads that PutFile kept
	// Failures counts failed operations by cause; every Cause has an
	// entry.
	Failures map[Cause]int64

	// UploadsInFlight is how many Put and PutFile calls are running
	// (sending, waiting on the bandwidth cap, or between retries): the
	// depth of the upload queue.
	UploadsInFlight int
	// PendingBytes is what those uploads still have to send, as far as
	// their sizes are known.
	PendingBytes int64
	// OldestUpload is when the longest-running of them started; zero
	// when none runs.
	OldestUpload time.Time
}

// stats are the live counters behind Stats.
type stats struct {
	upBytes, upObjects, downBytes, retries, resumedParts atomic.Int64
	failures                                             [len(causes)]atomic.Int64

	mu       sync.Mutex
	inflight map[*pending]struct{}
}

func (s *stats) init() { s.inflight = map[*pending]struct{}{} }

// pending is one upload in flight.
type pending struct {
	s     *stats
	start time.Time
	left  int64 // bytes still to send; guarded by s.mu
}

func (s *stats) begin(now time.Time, size int64) *pending {
	p := &pending{s: s, start: now, left: max(size, 0)}
	s.mu.Lock()
	s.inflight[p] = struct{}{}
	s.mu.Unlock()
	return p
}

// sent notes n more bytes acknowledged.
func (p *pending) sent(n int64) {
	if p == nil {
		return
	}
	p.s.mu.Lock()
	p.left = max(p.left-n, 0)
	p.s.mu.Unlock()
}

func (p *pending) done() {
	p.s.mu.Lock()
	delete(p.s.inflight, p)
	p.s.mu.Unlock()
}

func (s *stats) uploaded(n int64, object bool) {
	s.upBytes.Add(n)
	if object {
		s.upObjects.Add(1)
	}
}

func (s *stats) downloaded(n int64) { s.downBytes.Add(n) }

func (s *stats) failed(c Cause) {
	for i, k := range causes {
		if k == c {
			s.failures[i].Add(1)
			return
		}
	}
	s.failures[len(causes)-1].Add(1) // CauseOther
}

func (s *stats) snapshot() Stats {
	st := Stats{
		UploadedBytes:   s.upBytes.Load(),
		UploadedObjects: s.upObjects.Load(),
		DownloadedBytes: s.downBytes.Load(),
		Retries:         s.retries.Load(),
		ResumedParts:    s.resumedParts.Load(),
		Failures:        make(map[Cause]int64, len(causes)),
	}
	for i, c := range causes {
		st.Failures[c] = s.failures[i].Load()
	}
	s.mu.Lock()
	for p := range s.inflight {
		st.UploadsInFlight++
		st.PendingBytes += p.left
		if st.OldestUpload.IsZero() || p.start.Before(st.OldestUpload) {
			st.OldestUpload = p.start
		}
	}
	s.mu.Unlock()
	return st
}

// Stats returns a snapshot of the Bucket's counters.
func (b *Bucket) Stats() Stats { return b.st.snapshot() }

// Collector returns a prometheus.Collector of the Bucket's Stats, with
// metric names under namespace ("runnel_edge" gives
// runnel_edge_objstore_uploaded_bytes_total, …) and constLabels on every
// series (to tell two Buckets of one process apart).
func (b *Bucket) Collector(namespace string, constLabels prometheus.Labels) prometheus.Collector {
	return NewCollector(namespace, constLabels, b.Stats, b.cfg.Clock.Now)
}

// NewCollector makes a prometheus.Collector of the Stats that stats returns
// (a Bucket's or a Mem's); now dates the oldest upload's age. The metrics:
//
//	<ns>_objstore_uploaded_bytes_total        counter
//	<ns>_objstore_uploaded_objects_total      counter
//	<ns>_objstore_downloaded_bytes_total      counter
//	<ns>_objstore_retries_total               counter
//	<ns>_objstore_resumed_parts_total         counter
//	<ns>_objstore_failures_total{cause}       counter, every cause present
//	<ns>_objstore_uploads_in_flight           gauge
//	<ns>_objstore_upload_pending_bytes        gauge
//	<ns>_objstore_oldest_upload_age_seconds   gauge, 0 when none runs
func NewCollector(namespace string, constLabels prometheus.Labels, stats func() Stats, now func() time.Time) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "objstore", name), help, labels, constLabels)
	}
	return &collector{
		stats:     stats,
		now:       now,
		upBytes:   d("uploaded_bytes_total", "Payload bytes the object store acknowledged."),
		upObjects: d("uploaded_objects_total", "Objects created in the object store."),
		downBytes: d("downloaded_bytes_total", "Bytes read from the object store."),
		retries:   d("retries_total", "Object store requests repeated after a retryable failure (5xx, timeout, reset), and downloads resumed."),
		resumed:   d("resumed_parts_total", "Parts of interrupted multipart uploads kept by a later upload of the same file."),
		failures:  d("failures_total", "Failed object store operations by cause (retryable: gave up after retries; access: credentials or permissions; no_bucket; tls; exists; not_found; canceled; corrupt; other).", "cause"),
		inflight:  d("uploads_in_flight", "Uploads running (sending, waiting on the bandwidth cap, or between retries)."),
		pending:   d("upload_pending_bytes", "Bytes the uploads in flight still have to send."),
		oldest:    d("oldest_upload_age_seconds", "Age of the longest-running upload in flight; 0 when none runs."),
	}
}

type collector struct {
	stats                                           func() Stats
	now                                             func() time.Time
	upBytes, upObjects, downBytes, retries, resumed *prometheus.Desc
	failures, inflight, pending, oldest             *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.upBytes, c.upObjects, c.downBytes, c.retries, c.resumed, c.failures, c.inflight, c.pending, c.oldest} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.upBytes, s.UploadedBytes)
	counter(c.upObjects, s.UploadedObjects)
	counter(c.downBytes, s.DownloadedBytes)
	counter(c.retries, s.Retries)
	counter(c.resumed, s.ResumedParts)
	for _, cause := range causes {
		counter(c.failures, s.Failures[cause], string(cause))
	}
	ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(s.UploadsInFlight))
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(s.PendingBytes))
	age := 0.0
	if !s.OldestUpload.IsZero() {
		age = max(c.now().Sub(s.OldestUpload).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
}
