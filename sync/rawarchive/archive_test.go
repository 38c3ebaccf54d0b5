package rawarchive_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-io/runnel/checkpoint"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/sync/rawarchive"
)

// memStore is an in-memory Store that never overwrites; failPut, when set,
// fails the Put of keys it matches (a crash or an outage at that step).
type memStore struct {
	mu      sync.Mutex
	objs    map[string][]byte
	failPut func(key string) bool
}

func newMem() *memStore { return &memStore{objs: map[string][]byte{}} }

func (s *memStore) Put(_ context.Context, key string, r io.Reader, _ int64) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failPut != nil && s.failPut(key) {
		return errors.New("injected outage")
	}
	if _, ok := s.objs[key]; ok {
		return checkpoint.ErrExists
	}
	s.objs[key] = b
	return nil
}

func (s *memStore) Get(_ context.Context, key string) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objs[key]
	if !ok {
		return nil, checkpoint.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (s *memStore) List(_ context.Context, prefix string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}

// writeLog fills a log with n records in small segments and returns its
// sealed segments (as the lane would upload them) and the records.
func writeLog(t *testing.T, n int) ([]rawarchive.Segment, [][]byte) {
	t.Helper()
	ctx := context.Background()
	l, _, err := ingestlog.Open(ctx, t.TempDir(), &ingestlog.Options{SegmentSize: 4 << 10, Compression: ingestlog.CompressionZstd, Sync: ingestlog.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(ctx) })
	var recs [][]byte
	for i := range n {
		r := fmt.Appendf(nil, `{"device":"d-%d","seq":%d,"t":%d}`, i%5, i, 1700000000000+int64(i)*250)
		recs = append(recs, r)
		p, err := l.Append(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.WaitDurable(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var segs []rawarchive.Segment
	for _, s := range l.Sealed() {
		segs = append(segs, rawarchive.Segment{Name: s.Name, Path: s.Path, First: uint64(s.First), End: uint64(s.End),
			SealedAt: time.Date(2026, 12, 2, 23, 59, 59, 0, time.UTC).Add(time.Duration(s.First) * time.Millisecond)})
	}
	if len(segs) < 3 {
		t.Fatalf("%d sealed segments, want several", len(segs))
	}
	return segs, recs
}

// readBack fetches every segment of the catalog from pos from on and
// decodes it as the replay does.
func readBack(t *testing.T, a *rawarchive.Archive, from uint64) ([][]byte, []rawarchive.Gap) {
	t.Helper()
	ctx := context.Background()
	cat, err := a.Catalog(ctx)
	if err != nil {
		t.Fatalf("Catalog: %v", err)
	}
	picked, gaps := rawarchive.Range(cat, from, 0)
	var out [][]byte
	for _, m := range picked {
		raw, err := a.Fetch(ctx, m)
		if err != nil {
			t.Fatalf("Fetch(%s): %v", m.Key(), err)
		}
		if _, err := ingestlog.ReadSegment(ctx, bytes.NewReader(raw), int64(len(raw)), m.Segment, func(pos ingestlog.Position, rec []byte) error {
			if uint64(pos) >= from {
				out = append(out, bytes.Clone(rec))
			}
			return nil
		}); err != nil {
			t.Fatalf("ReadSegment(%s): %v", m.Segment, err)
		}
	}
	return out, gaps
}

func TestUploadThenReadBack(t *testing.T) {
	segs, recs := writeLog(t, 400)
	st := newMem()
	a := &rawarchive.Archive{Store: st, Edge: "gw-1"}
	for _, s := range segs {
		m, err := a.Upload(context.Background(), s)
		if err != nil {
			t.Fatalf("Upload(%s): %v", s.Name, err)
		}
		if !strings.HasPrefix(m.Key(), "gw-1/raw/2026/12/0") {
			t.Fatalf("manifest key %s: want under gw-1/raw/<yyyy>/<mm>/<dd>/", m.Key())
		}
	}
	got, gaps := readBack(t, a, 0)
	want := recs[:segs[len(segs)-1].End]
	if len(gaps) != 0 || !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("read back %d records (gaps %v), want the %d archived", len(got), gaps, len(want))
	}
	// From the middle of a segment.
	mid := segs[1].First + 3
	got, _ = readBack(t, a, mid)
	if !slices.EqualFunc(got, want[mid:], bytes.Equal) {
		t.Fatalf("from %d: %d records, want %d", mid, len(got), len(want[mid:]))
	}
}

// A crash after the object and before the manifest, then the retry: one
// manifest, one object, and the retry returns what a clean upload would.
func TestUploadRetryIsIdempotent(t *testing.T) {
	segs, _ := writeLog(t, 200)
	st := newMem()
	a := &rawarchive.Archive{Store: st, Edge: "gw-1"}
	st.failPut = func(k string) bool { return strings.HasSuffix(k, ".json") }
	if _, err := a.Upload(context.Background(), segs[0]); err == nil {
		t.Fatal("Upload with the manifest's put failing: no error")
	}
	if cat, _ := a.Catalog(context.Background()); len(cat) != 0 {
		t.Fatalf("a manifest is listed after its put failed: %v", cat)
	}
	st.failPut = nil
	m1, err := a.Upload(context.Background(), segs[0])
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	m2, err := a.Upload(context.Background(), segs[0])
	if err != nil {
		t.Fatalf("second retry: %v", err)
	}
	if m1 != m2 {
		t.Fatalf("retries disagree: %+v vs %+v", m1, m2)
	}
	if len(st.objs) != 2 {
		t.Fatalf("%d objects after three tries of one segment, want 2 (object + manifest): %v", len(st.objs), slices.Sorted(mapsKeys(st.objs)))
	}
}

func mapsKeys(m map[string][]byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// A flipped or cut object is refused by checksum, whichever byte it is.
func TestFetchRefusesDamage(t *testing.T) {
	segs, _ := writeLog(t, 200)
	st := newMem()
	a := &rawarchive.Archive{Store: st, Edge: "gw-1"}
	m, err := a.Upload(context.Background(), segs[0])
	if err != nil {
		t.Fatal(err)
	}
	good := st.objs[m.Object]
	for name, bad := range map[string][]byte{
		"flipped first byte": flipped(good, 0),
		"flipped last byte":  flipped(good, len(good)-1),
		"cut":                good[:len(good)-1],
		"longer":             append(bytes.Clone(good), 0),
		"empty":              {},
	} {
		t.Run(name, func(t *testing.T) {
			st.objs[m.Object] = bad
			if _, err := a.Fetch(context.Background(), m); !errors.Is(err, rawarchive.ErrCorrupt) {
				t.Fatalf("Fetch: %v, want ErrCorrupt", err)
			}
		})
	}
	st.objs[m.Object] = good
	if _, err := a.Fetch(context.Background(), m); err != nil {
		t.Fatalf("Fetch of the restored object: %v", err)
	}
	delete(st.objs, m.Object)
	if _, err := a.Fetch(context.Background(), m); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Fetch of a missing object: %v, want ErrNotFound", err)
	}
}

func flipped(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1
	return c
}

func TestRangeReportsGaps(t *testing.T) {
	segs, recs := writeLog(t, 300)
	st := newMem()
	a := &rawarchive.Archive{Store: st, Edge: "gw-1"}
	for i, s := range segs {
		if i == 1 {
			continue // deleted unarchived at the disk cap
		}
		if _, err := a.Upload(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	got, gaps := readBack(t, a, 0)
	want := rawarchive.Gap{From: segs[1].First, To: segs[1].End}
	if len(gaps) != 1 || gaps[0] != want {
		t.Fatalf("gaps %v, want [%v]", gaps, want)
	}
	if n := len(recs[:segs[len(segs)-1].End]) - int(want.To-want.From); len(got) != n {
		t.Fatalf("%d records read around the gap, want %d", len(got), n)
	}
}

func TestCatalogRefusesABadManifest(t *testing.T) {
	segs, _ := writeLog(t, 200)
	st := newMem()
	a := &rawarchive.Archive{Store: st, Edge: "gw-1"}
	m, err := a.Upload(context.Background(), segs[0])
	if err != nil {
		t.Fatal(err)
	}
	st.objs[m.Key()] = bytes.Replace(st.objs[m.Key()], []byte(`"end"`), []byte(`"End2"`), 1)
	if _, err := a.Catalog(context.Background()); !errors.Is(err, rawarchive.ErrCorrupt) {
		t.Fatalf("Catalog over a damaged manifest: %v, want ErrCorrupt", err)
	}
}

// FuzzDecodeManifest: never panics; what it accepts re-encodes to a
// manifest it accepts again with the same fields.
func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(`{"format":"runnel-raw-segment","version":1,"edge":"gw-1","segment":"00000000000000000000.seg","first":0,"end":10,"raw_bytes":100,"raw_sha256":"` + strings.Repeat("a", 64) + `","object":"gw-1/raw/2026/12/02/00000000000000000000-aaaaaaaaaaaaaaaa.seg.zst","object_bytes":50,"object_sha256":"` + strings.Repeat("a", 64) + `","sealed_at":"2026-12-02T10:00:00Z"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"version":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := rawarchive.DecodeManifest("", b)
		if err != nil {
			if !errors.Is(err, rawarchive.ErrCorrupt) && !errors.Is(err, rawarchive.ErrVersion) {
				t.Fatalf("DecodeManifest: %v: not ErrCorrupt", err)
			}
			return
		}
		if _, err := rawarchive.DecodeManifest(m.Key(), b); err != nil {
			t.Fatalf("accepted without a key, refused under its own key %s: %v", m.Key(), err)
		}
	})
}

// TestUploadChecksFirst: bytes that Segment.Check refuses (a segment file
// written over while it was read) are not stored, object or manifest.
func TestUploadChecksFirst(t *testing.T) {
	segs, _ := writeLog(t, 200)
	st := newMem()
	a := &rawarchive.Archive{Store: st, Edge: "gw-1"}
	seg := segs[0]
	refused := errors.New("not a whole segment")
	seg.Check = func([]byte) error { return refused }
	if _, err := a.Upload(context.Background(), seg); !errors.Is(err, refused) {
		t.Fatalf("Upload: %v, want the check's error", err)
	}
	if len(st.objs) != 0 {
		t.Fatalf("stored %d objects of a segment its check refused", len(st.objs))
	}
}
