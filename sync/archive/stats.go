package archive

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stats are the counters of this process's run (the totals since the log
// began are in the state).
type stats struct {
	failures      map[string]uint64
	lastErr       string
	lastErrAt     time.Time
	compactedRows uint64
}

func (a *Archiver) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.failures[Cause(err)]++
	a.stats.lastErr = err.Error()
	a.stats.lastErrAt = a.o.Now()
}

// Status is what `runnel-hub archive status` prints and the metrics
// export.
type Status struct {
	LogID  string `json:"log"`
	Cursor uint64 `json:"cursor"` // every log entry up to it is published
	Last   uint64 `json:"last"`   // the highest log entry written
	// Pending is Last - Cursor: results committed by the hub and not yet
	// in a published manifest.
	Pending uint64 `json:"pending"`
	// OldestPending is when the oldest of them was emitted (zero: none).
	OldestPending time.Time `json:"oldest_pending,omitzero"`
	// Working names the work a crash would resume ("" when idle).
	Working        string    `json:"working,omitempty"`
	LastManifest   string    `json:"last_manifest,omitempty"`
	LastManifestAt time.Time `json:"last_manifest_at,omitzero"`
	// LastCompaction is the manifest the last compaction published.
	LastCompaction     string    `json:"last_compaction,omitempty"`
	LastCompactionAt   time.Time `json:"last_compaction_at,omitzero"`
	LastCompactedFiles int       `json:"last_compacted_files,omitempty"`
	LastCompactedRows  int64     `json:"last_compacted_rows,omitempty"`
	Partitions         int       `json:"partitions"`
	PendingDeletes     int       `json:"pending_deletes"`
	Totals             Totals    `json:"totals"`
	// Failures counts failed steps by cause (Cause) since this process
	// started; LastError is the latest.
	Failures    map[string]uint64 `json:"failures,omitempty"`
	LastError   string            `json:"last_error,omitempty"`
	LastErrorAt time.Time         `json:"last_error_at,omitzero"`
}

// Status returns the archive's status. It reads the log (the oldest
// pending entry) and may be called at any time.
func (a *Archiver) Status() Status {
	a.mu.Lock()
	st := a.st
	s := Status{
		LogID: st.LogID, Cursor: st.Cursor, Partitions: len(st.Partitions), PendingDeletes: len(st.GC),
		LastManifest: st.Last.Manifest, LastCompaction: st.Last.Compaction,
		LastCompactedFiles: st.Last.CompactedIn, LastCompactedRows: st.Last.CompactedRow,
		Totals: st.Totals, LastError: a.stats.lastErr, LastErrorAt: a.stats.lastErrAt,
		Failures: map[string]uint64{},
	}
	for k, v := range a.stats.failures {
		s.Failures[k] = v
	}
	a.mu.Unlock()
	return StatusOf(st, a.o.Log, s)
}

// StatusOf completes s with what the state and the log say; it is how
// `runnel-hub archive status` reads a hub store that no hub has open.
func StatusOf(st *state, log Log, s Status) Status {
	if st.Last.ManifestAt != 0 {
		s.LastManifestAt = time.UnixMilli(st.Last.ManifestAt).UTC()
	}
	if st.Last.CompactionAt != 0 {
		s.LastCompactionAt = time.UnixMilli(st.Last.CompactionAt).UTC()
	}
	if in := st.Intent; in != nil {
		s.Working = in.Cause + " " + in.Partition
		if in.Cause == causeAppend {
			s.Working = "append of log entries " + uintString(in.From) + " to " + uintString(in.To)
		}
	}
	s.Last = log.Last()
	if s.Last > s.Cursor {
		s.Pending = s.Last - s.Cursor
		var r Row
		_ = log.Scan(s.Cursor, s.Cursor+1, func(_ uint64, e []byte) error {
			if DecodeEntry(e, &r) == nil {
				s.OldestPending = time.UnixMilli(r.Emitted).UTC()
			}
			return nil
		})
	}
	return s
}

// ReadStatus returns the status of the archive whose log is log, without
// an Archiver (the hub need not run).
func ReadStatus(log Log) (Status, error) {
	b, err := log.State()
	if err != nil || b == nil {
		return Status{}, err
	}
	st, err := decodeState(b)
	if err != nil {
		return Status{}, err
	}
	return StatusOf(st, log, Status{LogID: st.LogID, Cursor: st.Cursor, Partitions: len(st.Partitions),
		PendingDeletes: len(st.GC), LastManifest: st.Last.Manifest, LastCompaction: st.Last.Compaction,
		LastCompactedFiles: st.Last.CompactedIn, LastCompactedRows: st.Last.CompactedRow, Totals: st.Totals}), nil
}

func uintString(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// Collector returns the archive's Prometheus metrics (runnel_hub_archive_*).
func (a *Archiver) Collector() prometheus.Collector { return collector{a} }

var (
	descRows     = prometheus.NewDesc("runnel_hub_archive_rows_total", "Result versions published in the archive (since its log began).", nil, nil)
	descFiles    = prometheus.NewDesc("runnel_hub_archive_files_total", "Parquet files appended to the archive (since its log began).", nil, nil)
	descBytes    = prometheus.NewDesc("runnel_hub_archive_bytes_total", "Bytes of Parquet files appended to the archive (since its log began).", nil, nil)
	descManif    = prometheus.NewDesc("runnel_hub_archive_manifests_total", "Manifests published (since the log began).", nil, nil)
	descCompact  = prometheus.NewDesc("runnel_hub_archive_compactions_total", "Partitions compacted (since the log began).", nil, nil)
	descExpired  = prometheus.NewDesc("runnel_hub_archive_expired_rows_total", "Results not archived because their partition was past the archive's retention when they were flushed.", nil, nil)
	descInvalid  = prometheus.NewDesc("runnel_hub_archive_invalid_rows_total", "Results set aside because they cannot be archived (a key not in the pipeline's key encoding, values that do not fit its schema); logged with their log sequence.", nil, nil)
	descPending  = prometheus.NewDesc("runnel_hub_archive_pending", "Results committed by the hub and not yet in a published manifest (the archive log's depth).", nil, nil)
	descOldest   = prometheus.NewDesc("runnel_hub_archive_oldest_pending_seconds", "Age of the oldest result not yet archived (0: none).", nil, nil)
	descFailures = prometheus.NewDesc("runnel_hub_archive_failures_total", "Failed archive steps by cause (store, log, corrupt, conflict, local, invalid); each is retried.", []string{"cause"}, nil)
)

type collector struct{ a *Archiver }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRows, descFiles, descBytes, descManif, descCompact, descExpired, descInvalid, descPending, descOldest, descFailures} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.a.Status()
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(descRows, s.Totals.Rows)
	counter(descFiles, s.Totals.Files)
	counter(descBytes, s.Totals.Bytes)
	counter(descManif, s.Totals.Manifests)
	counter(descCompact, s.Totals.Compactions)
	counter(descExpired, s.Totals.Expired)
	counter(descInvalid, s.Totals.Invalid)
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(s.Pending))
	age := 0.0
	if !s.OldestPending.IsZero() {
		age = max(0, c.a.o.Now().Sub(s.OldestPending).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, age)
	for _, cause := range []string{"store", "log", "corrupt", "conflict", "local", "invalid"} {
		ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(s.Failures[cause]), cause)
	}
}
