package rawarchive

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// FormatVersion is the manifest version this package writes and reads.
const FormatVersion = 1

// maxManifestBytes bounds a manifest read from the store.
const maxManifestBytes = 64 << 10

// Manifest describes one archived segment. Its JSON form is the manifest
// object (docs/formats/raw-archive.md).
type Manifest struct {
	Format       string    `json:"format"` // "runnel-raw-segment"
	Version      int       `json:"version"`
	Edge         string    `json:"edge"`
	Segment      string    `json:"segment"` // the segment's file name in the ingest log
	First        uint64    `json:"first"`   // position of its first record
	End          uint64    `json:"end"`     // one past its last record
	RawBytes     int64     `json:"raw_bytes"`
	RawSHA256    string    `json:"raw_sha256"`
	Object       string    `json:"object"` // key of the compressed segment
	ObjectBytes  int64     `json:"object_bytes"`
	ObjectSHA256 string    `json:"object_sha256"`
	SealedAt     time.Time `json:"sealed_at"`
}

const formatName = "runnel-raw-segment"

var (
	hexSum  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	segName = regexp.MustCompile(`^[0-9]{20}\.seg$`)
)

// DecodeManifest parses and checks a manifest object read from key.
// Anything that is not a manifest this package would write is ErrCorrupt
// (or ErrVersion for another version), naming the key and the field.
func DecodeManifest(key string, b []byte) (Manifest, error) {
	var m Manifest
	if len(b) > maxManifestBytes {
		return m, fmt.Errorf("rawarchive: manifest %s: %d bytes, at most %d: %w", key, len(b), maxManifestBytes, ErrCorrupt)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("rawarchive: manifest %s: %v: %w", key, err, ErrCorrupt)
	}
	if dec.More() {
		return m, fmt.Errorf("rawarchive: manifest %s: data after the manifest: %w", key, ErrCorrupt)
	}
	if m.Format != formatName {
		return m, fmt.Errorf("rawarchive: manifest %s: format %q, want %q: %w", key, m.Format, formatName, ErrCorrupt)
	}
	if m.Version != FormatVersion {
		return m, fmt.Errorf("rawarchive: manifest %s: version %d, this runnel reads %d: %w", key, m.Version, FormatVersion, ErrVersion)
	}
	if err := m.check(); err != nil {
		return m, fmt.Errorf("rawarchive: manifest %s: %v: %w", key, err, ErrCorrupt)
	}
	if want := m.key(); key != "" && !strings.HasSuffix(key, want) {
		return m, fmt.Errorf("rawarchive: manifest %s: describes segment %s, whose manifest is %s: %w", key, m.Segment, want, ErrCorrupt)
	}
	return m, nil
}

func (m *Manifest) check() error {
	switch {
	case m.Edge == "" || strings.ContainsAny(m.Edge, "/\x00"):
		return fmt.Errorf("edge %q: want a non-empty id without '/'", m.Edge)
	case !segName.MatchString(m.Segment):
		return fmt.Errorf("segment %q: want a segment file name", m.Segment)
	case m.Segment != segmentName(m.First):
		return fmt.Errorf("segment %s does not start at first %d", m.Segment, m.First)
	case m.End <= m.First:
		return fmt.Errorf("end %d: want > first %d", m.End, m.First)
	case m.RawBytes <= 0 || m.ObjectBytes <= 0:
		return fmt.Errorf("raw_bytes %d, object_bytes %d: want > 0", m.RawBytes, m.ObjectBytes)
	case !hexSum.MatchString(m.RawSHA256) || !hexSum.MatchString(m.ObjectSHA256):
		return fmt.Errorf("raw_sha256 %q, object_sha256 %q: want 64 hex digits", m.RawSHA256, m.ObjectSHA256)
	case m.SealedAt.IsZero():
		return fmt.Errorf("sealed_at: missing")
	case m.Object != m.objectKey():
		return fmt.Errorf("object %q: want %q", m.Object, m.objectKey())
	}
	return nil
}

// dayDir is <edge>/raw/<yyyy>/<mm>/<dd>/ of the manifest's seal time.
func (m *Manifest) dayDir() string {
	return EdgePrefix(m.Edge) + m.SealedAt.UTC().Format("2006/01/02") + "/"
}

// key is the manifest's own key.
func (m *Manifest) key() string { return fmt.Sprintf("%s%020d.json", m.dayDir(), m.First) }

// objectKey is the compressed segment's key.
func (m *Manifest) objectKey() string {
	return fmt.Sprintf("%s%020d-%s.seg.zst", m.dayDir(), m.First, m.ObjectSHA256[:16])
}

// Key returns the manifest's key in the store.
func (m *Manifest) Key() string { return m.key() }

// EdgePrefix is the prefix of an edge's raw archive.
func EdgePrefix(edge string) string { return edge + "/raw/" }

func segmentName(first uint64) string { return fmt.Sprintf("%020d.seg", first) }
