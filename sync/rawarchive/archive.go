package rawarchive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/runnel-io/runnel/checkpoint"
)

// Store is the object storage the lane writes to, keys relative to the
// archive's prefix: the part of checkpoint.Store it uses (a
// checkpoint.DirStore or a sync/objstore Bucket). Put never overwrites (an
// existing key is checkpoint.ErrExists), Get of a missing key is
// checkpoint.ErrNotFound.
type Store interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	List(ctx context.Context, prefix string) ([]string, error)
}

// Archive is one edge's raw archive in a Store.
type Archive struct {
	Store Store
	Edge  string
}

// Segment is a sealed ingest-log segment to upload.
type Segment struct {
	Name       string // its file name, e.g. 00000000000000004096.seg
	Path       string
	First, End uint64 // its positions: [First, End)
	SealedAt   time.Time
	// Check, when set, verifies the bytes Upload read before anything is
	// stored: a segment given up and deleted while it was read may have
	// had its file written over (the ingest log reuses deleted segments'
	// files), and such bytes are refused rather than archived.
	Check func(raw []byte) error
}

// level is fixed: the same segment must compress to the same bytes, so
// that a retried upload finds the object the first try stored.
const level = zstd.SpeedDefault

// Upload compresses seg and stores it and then its manifest, unless they
// are there already (a retry after a crash): either way it returns the
// manifest that names the stored object. The segment file must not change
// while it runs (a sealed segment does not, until it is deleted: see
// Segment.Check).
func (a *Archive) Upload(ctx context.Context, seg Segment) (Manifest, error) {
	raw, err := os.ReadFile(seg.Path)
	if err != nil {
		return Manifest{}, fmt.Errorf("rawarchive: upload %s: %w", seg.Name, err)
	}
	if seg.Check != nil {
		if err := seg.Check(raw); err != nil {
			return Manifest{}, fmt.Errorf("rawarchive: upload %s: %w", seg.Name, err)
		}
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return Manifest{}, err
	}
	obj := enc.EncodeAll(raw, make([]byte, 0, len(raw)/3))
	enc.Close()
	rsum, osum := sha256.Sum256(raw), sha256.Sum256(obj)
	m := Manifest{
		Format: formatName, Version: FormatVersion, Edge: a.Edge,
		Segment: seg.Name, First: seg.First, End: seg.End,
		RawBytes: int64(len(raw)), RawSHA256: hex.EncodeToString(rsum[:]),
		ObjectBytes: int64(len(obj)), ObjectSHA256: hex.EncodeToString(osum[:]),
		SealedAt: seg.SealedAt.UTC().Truncate(time.Millisecond),
	}
	m.Object = m.objectKey()
	if err := m.check(); err != nil {
		return Manifest{}, fmt.Errorf("rawarchive: upload %s: %v", seg.Name, err)
	}
	if err := a.Store.Put(ctx, m.Object, bytes.NewReader(obj), int64(len(obj))); err != nil && !errors.Is(err, checkpoint.ErrExists) {
		return Manifest{}, fmt.Errorf("rawarchive: upload %s as %s: %w", seg.Name, m.Object, err)
	}
	// The object's key carries its checksum: one that exists holds these bytes.
	mb, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		return Manifest{}, err
	}
	mb = append(mb, '\n')
	err = a.Store.Put(ctx, m.key(), bytes.NewReader(mb), int64(len(mb)))
	switch {
	case err == nil:
		return m, nil
	case !errors.Is(err, checkpoint.ErrExists):
		return Manifest{}, fmt.Errorf("rawarchive: upload %s: manifest %s: %w", seg.Name, m.key(), err)
	}
	// A manifest is there: an earlier try finished. It must be of the same
	// positions; its object may hold other bytes of them (another
	// compression's, or a topic selection written again in other frames).
	old, err := a.manifest(ctx, m.key())
	if err != nil {
		return Manifest{}, err
	}
	if old.First != m.First || old.End != m.End {
		return Manifest{}, fmt.Errorf("rawarchive: upload %s: manifest %s is of other positions (%d-%d): %w",
			seg.Name, m.key(), old.First, old.End, ErrCorrupt)
	}
	return old, nil
}

func (a *Archive) manifest(ctx context.Context, key string) (Manifest, error) {
	b, err := a.get(ctx, key, maxManifestBytes)
	if err != nil {
		return Manifest{}, err
	}
	return DecodeManifest(key, b)
}

// get reads key whole, refusing more than limit bytes.
func (a *Archive) get(ctx context.Context, key string, limit int64) ([]byte, error) {
	rc, err := a.Store.Get(ctx, key)
	if err != nil {
		if errors.Is(err, checkpoint.ErrNotFound) {
			return nil, fmt.Errorf("rawarchive: %s: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("rawarchive: get %s: %w", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("rawarchive: get %s: %w", key, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("rawarchive: %s: more than %d bytes: %w", key, limit, ErrCorrupt)
	}
	return b, nil
}

// Catalog lists the edge's manifests, ordered by position. A manifest
// that does not decode is not skipped: Catalog fails with it.
func (a *Archive) Catalog(ctx context.Context) ([]Manifest, error) {
	keys, err := a.Store.List(ctx, EdgePrefix(a.Edge))
	if err != nil {
		return nil, fmt.Errorf("rawarchive: list %s: %w", EdgePrefix(a.Edge), err)
	}
	var out []Manifest
	for _, k := range keys {
		if !strings.HasSuffix(k, ".json") {
			continue
		}
		m, err := a.manifest(ctx, k)
		if err != nil {
			return nil, err
		}
		if m.Edge != a.Edge {
			return nil, fmt.Errorf("rawarchive: manifest %s names edge %q: %w", k, m.Edge, ErrCorrupt)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(x, y Manifest) int { return cmpU(x.First, y.First) })
	for i := 1; i < len(out); i++ {
		if out[i].First < out[i-1].End {
			return nil, fmt.Errorf("rawarchive: manifests %s and %s overlap (positions %d-%d and %d-%d): %w",
				out[i-1].key(), out[i].key(), out[i-1].First, out[i-1].End, out[i].First, out[i].End, ErrCorrupt)
		}
	}
	return out, nil
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Gap is a range of positions no manifest covers.
type Gap struct{ From, To uint64 } // [From, To)

// Range picks the manifests of cat (as Catalog orders them) that hold
// positions [from, to) (to 0: to the end of the archive), and the gaps
// between them inside that range.
func Range(cat []Manifest, from, to uint64) (picked []Manifest, gaps []Gap) {
	next := from
	for _, m := range cat {
		if m.End <= from || to != 0 && m.First >= to {
			continue
		}
		if m.First > next {
			gaps = append(gaps, Gap{next, m.First})
		}
		picked = append(picked, m)
		next = m.End
	}
	if to != 0 && next < to && len(picked) > 0 {
		gaps = append(gaps, Gap{next, to})
	}
	return picked, gaps
}

// Fetch downloads the segment m names and returns the segment file's
// bytes, verified against every size and checksum in m.
func (a *Archive) Fetch(ctx context.Context, m Manifest) ([]byte, error) {
	obj, err := a.get(ctx, m.Object, m.ObjectBytes)
	if err != nil {
		return nil, err
	}
	if int64(len(obj)) != m.ObjectBytes {
		return nil, fmt.Errorf("rawarchive: %s: %d bytes, the manifest says %d (truncated?): %w", m.Object, len(obj), m.ObjectBytes, ErrCorrupt)
	}
	if s := sha256.Sum256(obj); hex.EncodeToString(s[:]) != m.ObjectSHA256 {
		return nil, fmt.Errorf("rawarchive: %s: SHA-256 differs from the manifest's: %w", m.Object, ErrCorrupt)
	}
	// The output is bounded by the manifest's size (the cap limit); the
	// window, which the encoder may size beyond a small input, is bounded
	// apart.
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(max(m.RawBytes, 64<<20))),
		zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(obj, make([]byte, 0, m.RawBytes))
	if err != nil {
		return nil, fmt.Errorf("rawarchive: %s: inflate: %v: %w", m.Object, err, ErrCorrupt)
	}
	if int64(len(raw)) != m.RawBytes {
		return nil, fmt.Errorf("rawarchive: %s: inflates to %d bytes, the manifest says %d: %w", m.Object, len(raw), m.RawBytes, ErrCorrupt)
	}
	if s := sha256.Sum256(raw); hex.EncodeToString(s[:]) != m.RawSHA256 {
		return nil, fmt.Errorf("rawarchive: %s: the inflated segment's SHA-256 differs from the manifest's: %w", m.Object, ErrCorrupt)
	}
	return raw, nil
}
