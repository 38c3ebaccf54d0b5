package fleet

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// The byte layout of fleet.db; docs/formats/fleet-store.md is the
// reference. This file holds the codecs only: buckets, keys, the record
// frame and the records, apart from the code that decides what to write.

// storeFormat is meta/format: the layout version of the whole file.
const storeFormat = 1

// recordVersion is the leading byte of every value.
const recordVersion = 1

// Top-level buckets.
var (
	bucketMeta        = []byte("meta")
	bucketPipelines   = []byte("pipelines")   // one sub-bucket per pipeline
	bucketEdges       = []byte("edges")       // edge id -> edgeRecord
	bucketStatus      = []byte("status")      // edge id -> status record
	bucketDeployments = []byte("deployments") // one sub-bucket per deployment
	bucketAudit       = []byte("audit")       // u64be id -> auditRecord
	bucketTokens      = []byte("tokens")      // name -> tokenRecord

	topBuckets = [][]byte{bucketMeta, bucketPipelines, bucketEdges, bucketStatus, bucketDeployments, bucketAudit, bucketTokens}

	metaFormat = []byte("format")
	// Keys inside a pipeline's or a deployment's sub-bucket.
	keyHeader = []byte("h")
)

const (
	tagRevision = 'r' // pipelines/<name>/'r'<u32be revision>
	tagVersion  = 'v' // deployments/<name>/'v'<u32be version>
	tagRollout  = 'o' // deployments/<name>/'o'<u32be version>
)

func numKey(tag byte, n uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{tag}, n)
}

func auditKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// where is the place of a record: its bucket path and key. The frame's CRC
// covers it, so that a value copied under another key or into another
// bucket is caught.
type where [][]byte

func (w where) String() string {
	parts := make([]string, len(w))
	for i, p := range w {
		parts[i] = fmt.Sprintf("%q", p)
	}
	return strings.Join(parts, "/")
}

func (w where) crc(payload []byte) uint32 {
	var lenBuf [binary.MaxVarintLen64]byte
	crc := uint32(0)
	for _, p := range w {
		n := binary.PutUvarint(lenBuf[:], uint64(len(p)))
		crc = crc32.Update(crc, crcTable, lenBuf[:n])
		crc = crc32.Update(crc, crcTable, p)
	}
	return crc32.Update(crc, crcTable, payload)
}

// seal frames payload: version byte, CRC-32C (little endian) over the
// place (each bucket name and the key, each uvarint length-prefixed) and
// the payload, then the payload.
func seal(w where, payload []byte) []byte {
	out := make([]byte, 0, recordHeader+len(payload))
	out = append(out, recordVersion)
	out = binary.LittleEndian.AppendUint32(out, w.crc(payload))
	return append(out, payload...)
}

const recordHeader = 5

// unseal checks a value's frame and returns its payload. Errors wrap
// ErrCorrupt and name the record.
func unseal(w where, value []byte) ([]byte, error) {
	switch {
	case len(value) < recordHeader:
		return nil, fmt.Errorf("fleet: store: record %s of %d bytes: %w", w, len(value), ErrCorrupt)
	case value[0] != recordVersion:
		return nil, fmt.Errorf("fleet: store: record %s has version %d, this hub reads %d: %w", w, value[0], recordVersion, ErrCorrupt)
	}
	payload := value[recordHeader:]
	if w.crc(payload) != binary.LittleEndian.Uint32(value[1:]) {
		return nil, fmt.Errorf("fleet: store: record %s: CRC mismatch: %w", w, ErrCorrupt)
	}
	return payload, nil
}

// putJSON writes v, JSON-encoded and sealed, at w (the bucket b is the
// one w names).
func putJSON(b *bolt.Bucket, w where, v any) error {
	payload, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("fleet: store: encode %s: %w", w, err)
	}
	return b.Put(w[len(w)-1], seal(w, payload))
}

// readJSON decodes the sealed JSON value at w.
func readJSON(w where, value []byte, v any) error {
	payload, err := unseal(w, value)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return fmt.Errorf("fleet: store: record %s: %v: %w", w, err, ErrCorrupt)
	}
	return nil
}

// The records. Payloads are JSON: fields are added with omitempty and
// read as zero by older code, which keeps the format stable without a
// schema compiler; the frame carries the integrity.

// ref names a pipeline revision.
type ref struct {
	Name     string `json:"name"`
	Revision uint32 `json:"revision"`
}

// pipelineRecord is pipelines/<name>/"h". A deleted pipeline leaves it
// as a tombstone (Deleted, with the number of its last revision and no
// revisions), so that a pipeline created again under the name goes on
// numbering after it: a revision number never names two specs.
type pipelineRecord struct {
	Name      string `json:"name"`
	CreatedMs int64  `json:"created_ms"`
	UpdatedMs int64  `json:"updated_ms"`
	Deleted   bool   `json:"deleted,omitempty"`
	Last      uint32 `json:"last,omitempty"`
}

// revision is pipelines/<name>/'r'<u32be>: immutable once written.
type revision struct {
	Name      string `json:"name"`
	Num       uint32 `json:"revision"`
	Spec      string `json:"spec"`
	Author    string `json:"author"`
	CreatedMs int64  `json:"created_ms"`
	Hash      string `json:"hash"`
	Class     uint32 `json:"compat_class"`
}

// assignment is the version of one deployment an edge is given.
type assignment struct {
	// Version of the deployment whose pipelines the edge is to run.
	Version uint32 `json:"version"`
	// By is the version whose rollout set Version (0: set otherwise,
	// such as by a rollback); Prior is what the edge had before it (0:
	// nothing), which a rollback of By restores.
	By    uint32 `json:"by,omitempty"`
	Prior uint32 `json:"prior,omitempty"`
	// Gen is the edge's desired generation once Version was assigned:
	// the gate waits for the edge to have applied it.
	Gen uint64 `json:"gen"`
}

// edgeRecord is edges/<id>.
type edgeRecord struct {
	ID           string            `json:"id"`
	Labels       map[string]string `json:"labels,omitempty"`
	HubLabels    map[string]string `json:"hub_labels,omitempty"`
	Version      string            `json:"version,omitempty"`
	OS           string            `json:"os,omitempty"`
	Arch         string            `json:"arch,omitempty"`
	RegisteredMs int64             `json:"registered_ms"`
	// Generation numbers the desired sets; Desired is the current one
	// (sorted by name), derived from Assign when it changes.
	Generation uint64                `json:"generation"`
	Desired    []ref                 `json:"desired,omitempty"`
	Assign     map[string]assignment `json:"assign,omitempty"`
}

// deploymentRecord is deployments/<name>/"h".
type deploymentRecord struct {
	Name      string `json:"name"`
	CreatedMs int64  `json:"created_ms"`
}

// strategy mirrors runnelv1.Strategy.
type strategy struct {
	Staged             bool    `json:"staged,omitempty"`
	Canary             uint32  `json:"canary,omitempty"`
	CanaryPercent      uint32  `json:"canary_percent,omitempty"`
	Batch              uint32  `json:"batch,omitempty"`
	BatchPercent       uint32  `json:"batch_percent,omitempty"`
	SoakMs             int64   `json:"soak_ms,omitempty"`
	MaxDeadLetterRate  float64 `json:"max_dead_letter_rate,omitempty"`
	RollbackOnFailure  bool    `json:"rollback_on_failure,omitempty"`
	ProgressDeadlineMs int64   `json:"progress_deadline_ms,omitempty"`
}

// versionRecord is deployments/<name>/'v'<u32be>: immutable once written.
type versionRecord struct {
	Num       uint32   `json:"version"`
	Selector  string   `json:"selector"`
	Pipelines []ref    `json:"pipelines"` // as requested; revision 0 = latest
	Strategy  strategy `json:"strategy"`
	Resolved  []ref    `json:"resolved"`
	Author    string   `json:"author"`
	CreatedMs int64    `json:"created_ms"`
	// Targets: the edges the selector matched when the version was
	// created, sorted; Ends: the end (exclusive) in Targets of each step.
	Targets []string `json:"targets,omitempty"`
	Ends    []int    `json:"ends,omitempty"`
}

// rolloutRecord is deployments/<name>/'o'<u32be>: the rollout of a
// version, rewritten at each change.
type rolloutRecord struct {
	Phase          string   `json:"phase"`
	Step           int      `json:"step"`
	StepStartedMs  int64    `json:"step_started_ms,omitempty"`
	HealthySinceMs int64    `json:"healthy_since_ms,omitempty"`
	Message        string   `json:"message,omitempty"`
	FailedEdges    []string `json:"failed_edges,omitempty"`
	RolledBack     bool     `json:"rolled_back,omitempty"`
}

// auditRecord is audit/<u64be id>.
type auditRecord struct {
	ID     uint64 `json:"id"`
	AtMs   int64  `json:"at_ms"`
	Who    string `json:"who"`
	Action string `json:"action"`
	Object string `json:"object"`
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
}

// tokenRecord is tokens/<name>. Sum is the SHA-256 of the secret; the
// secret itself is never stored.
type tokenRecord struct {
	Name      string `json:"name"`
	Role      string `json:"role"`
	CreatedMs int64  `json:"created_ms"`
	CreatedBy string `json:"created_by"`
	Sum       []byte `json:"sum"`
}

// The status record, status/<id>, is binary: it is the one record written
// often. Payload: u64be seq | i64be last seen (Unix ms) | EdgeStatus
// (protobuf). seq grows with each status of the edge, so that a write
// that lost a race to a newer one does not replace it.
const statusHeader = 16

func encodeStatus(seq uint64, lastSeenMs int64, st []byte) []byte {
	out := make([]byte, 0, statusHeader+len(st))
	out = binary.BigEndian.AppendUint64(out, seq)
	out = binary.BigEndian.AppendUint64(out, uint64(lastSeenMs))
	return append(out, st...)
}

func decodeStatus(w where, payload []byte) (seq uint64, lastSeenMs int64, st []byte, err error) {
	if len(payload) < statusHeader {
		return 0, 0, nil, fmt.Errorf("fleet: store: status record %s of %d bytes: %w", w, len(payload), ErrCorrupt)
	}
	return binary.BigEndian.Uint64(payload), int64(binary.BigEndian.Uint64(payload[8:])), payload[statusHeader:], nil
}

// putStatus writes a status record unless the stored one is newer.
func putStatus(tx *bolt.Tx, id string, seq uint64, payload []byte) error {
	b := tx.Bucket(bucketStatus)
	w := where{bucketStatus, []byte(id)}
	if old := b.Get(w[1]); old != nil {
		if p, err := unseal(w, old); err == nil && len(p) >= statusHeader && binary.BigEndian.Uint64(p) >= seq {
			return nil
		}
	}
	return b.Put(w[1], seal(w, payload))
}
