package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Partition is one directory of the archive: the results of one pipeline
// whose windows start within one hour (UTC).
type Partition struct {
	Pipeline string
	Date     string // yyyy-mm-dd
	Hour     int    // 0..23
}

// PartitionOf is the partition of a window starting at start (Unix ms).
func PartitionOf(pipeline string, start int64) Partition {
	t := time.UnixMilli(start).UTC()
	return Partition{Pipeline: pipeline, Date: t.Format(time.DateOnly), Hour: t.Hour()}
}

// String is the partition's directory: pipeline=<p>/date=<yyyy-mm-dd>/hour=<hh>.
func (p Partition) String() string {
	return fmt.Sprintf("pipeline=%s/date=%s/hour=%02d", p.Pipeline, p.Date, p.Hour)
}

// Start and End bound the window starts of the partition (Unix ms).
func (p Partition) Start() int64 {
	t, err := time.Parse(time.DateOnly, p.Date)
	if err != nil {
		return 0
	}
	return t.Add(time.Duration(p.Hour) * time.Hour).UnixMilli()
}

// End: see Start.
func (p Partition) End() int64 { return p.Start() + time.Hour.Milliseconds() }

// parsePartition parses Partition.String's form.
func parsePartition(s string) (Partition, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "pipeline=") || !strings.HasPrefix(parts[1], "date=") || !strings.HasPrefix(parts[2], "hour=") {
		return Partition{}, fmt.Errorf("partition %q is not pipeline=<p>/date=<yyyy-mm-dd>/hour=<hh>", s)
	}
	p := Partition{Pipeline: parts[0][len("pipeline="):], Date: parts[1][len("date="):]}
	h, err := strconv.Atoi(parts[2][len("hour="):])
	if err != nil || h < 0 || h > 23 || len(parts[2]) != len("hour=00") {
		return Partition{}, fmt.Errorf("partition %q: bad hour", s)
	}
	p.Hour = h
	if _, err := time.Parse(time.DateOnly, p.Date); err != nil || !validPipeline(p.Pipeline) {
		return Partition{}, fmt.Errorf("partition %q: bad pipeline or date", s)
	}
	return p, nil
}

// manifestDir is the directory of a partition's manifests.
const manifestDir = "_manifest"

// ManifestKey is the key of generation gen of p's manifest.
func ManifestKey(p Partition, gen uint64) string {
	return fmt.Sprintf("%s/%s/%020d.json", p, manifestDir, gen)
}

// manifestFormat is Manifest.Format.
const manifestFormat = 1

// Manifest is one generation of a partition's file list: the files a
// reader of the partition reads, all of them and only them. Generation
// g+1 supersedes g: it lists the files of g that stay and those added
// (Cause "append": the files of a range of the hub's archive log;
// "compact": one file per schema merging the ones it replaces). A
// manifest key is written once (never overwritten), so a reader that
// takes each partition's highest generation sees a consistent set.
type Manifest struct {
	Format     int    `json:"format"`
	Pipeline   string `json:"pipeline"`
	Date       string `json:"date"`
	Hour       int    `json:"hour"`
	Generation uint64 `json:"generation"`
	// Log is the id of the hub's archive log that wrote it (16 hex digits).
	Log   string `json:"log"`
	Cause string `json:"cause"`
	// LogFrom and LogTo: the log range whose results the append added.
	LogFrom uint64 `json:"log_from,omitempty"`
	LogTo   uint64 `json:"log_to,omitempty"`
	// Created is the hub's clock when it was planned, Unix ms.
	Created int64  `json:"created_ms"`
	Files   []File `json:"files"`
}

// File is one Parquet file of a manifest.
type File struct {
	Path   string `json:"path"` // key relative to the archive root
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	Schema string `json:"schema"` // Schema.ID, 16 hex digits
	Class  uint32 `json:"class"`
	// Sorted: rows in (class, key, window_start, window_end, version)
	// order (a compacted file).
	Sorted bool `json:"sorted,omitempty"`
}

// Partition returns the manifest's partition.
func (m *Manifest) Partition() Partition {
	return Partition{Pipeline: m.Pipeline, Date: m.Date, Hour: m.Hour}
}

// Encode returns the manifest's JSON.
func (m *Manifest) Encode() []byte {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		panic(err) // plain fields only
	}
	return append(b, '\n')
}

// maxManifest bounds a manifest's size for the decoder.
const maxManifest = 64 << 20

// DecodeManifest decodes and checks a manifest. Errors match ErrCorrupt
// and say what is wrong.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > maxManifest {
		return nil, fmt.Errorf("archive: manifest of %d bytes: %w", len(b), ErrCorrupt)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("archive: manifest: %v: %w", err, ErrCorrupt)
	}
	if dec.More() {
		return nil, fmt.Errorf("archive: manifest: data after the object: %w", ErrCorrupt)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("archive: manifest %s generation %d: %v: %w", m.Partition(), m.Generation, err, ErrCorrupt)
	}
	return &m, nil
}

func (m *Manifest) check() error {
	if m.Format != manifestFormat {
		return fmt.Errorf("format %d, this hub reads %d", m.Format, manifestFormat)
	}
	p := m.Partition()
	if _, err := parsePartition(p.String()); err != nil {
		return err
	}
	if m.Generation == 0 {
		return fmt.Errorf("generation 0")
	}
	if !isHex16(m.Log) {
		return fmt.Errorf("log id %q is not 16 hex digits", m.Log)
	}
	switch m.Cause {
	case causeAppend:
		if m.LogFrom == 0 || m.LogTo < m.LogFrom {
			return fmt.Errorf("append of log range [%d, %d]", m.LogFrom, m.LogTo)
		}
	case causeCompact:
	default:
		return fmt.Errorf("cause %q", m.Cause)
	}
	seen := map[string]bool{}
	dir := p.String() + "/"
	for _, f := range m.Files {
		switch {
		case !strings.HasPrefix(f.Path, dir) || strings.Contains(f.Path[len(dir):], "/") || !strings.HasSuffix(f.Path, ".parquet") || path.Clean(f.Path) != f.Path:
			return fmt.Errorf("file %q is not a Parquet file of the partition", f.Path)
		case seen[f.Path]:
			return fmt.Errorf("file %q listed twice", f.Path)
		case f.Rows < 0 || f.Bytes < 0:
			return fmt.Errorf("file %q: negative size", f.Path)
		case !isHex16(f.Schema):
			return fmt.Errorf("file %q: schema %q is not 16 hex digits", f.Path, f.Schema)
		}
		seen[f.Path] = true
	}
	return nil
}

func isHex16(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

const (
	causeAppend  = "append"
	causeCompact = "compact"
)

// getManifest reads and decodes the manifest under key.
func getManifest(ctx context.Context, st Store, key string) (*Manifest, error) {
	rc, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("archive: get %s: %w", key, err)
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return m, nil
}

// Live returns the latest manifest of every partition under prefix (""
// for the whole archive, "pipeline=line-temps/" for one pipeline), in
// partition order: what a reader reads. Keys that are neither manifests
// nor Parquet files are ignored.
func Live(ctx context.Context, st Store, prefix string) ([]*Manifest, error) {
	keys, err := st.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	latest := map[string]string{}
	var order []string
	for _, k := range keys {
		dir, name := path.Split(k)
		if !strings.HasSuffix(dir, "/"+manifestDir+"/") || !strings.HasSuffix(name, ".json") {
			continue
		}
		part := strings.TrimSuffix(dir, "/"+manifestDir+"/")
		if _, err := parsePartition(part); err != nil {
			continue
		}
		if _, ok := latest[part]; !ok {
			order = append(order, part)
		}
		if k > latest[part] { // zero-padded generations sort as numbers
			latest[part] = k
		}
	}
	slices.Sort(order)
	out := make([]*Manifest, 0, len(order))
	for _, part := range order {
		m, err := getManifest(ctx, st, latest[part])
		if err != nil {
			return nil, err
		}
		if want := ManifestKey(m.Partition(), m.Generation); want != latest[part] {
			return nil, fmt.Errorf("archive: manifest %s holds generation %d of %s: %w", latest[part], m.Generation, m.Partition(), ErrCorrupt)
		}
		out = append(out, m)
	}
	return out, nil
}
