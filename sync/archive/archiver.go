package archive

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Log is the durable archive log the hub's commits append to (in the
// same transaction as the results they emit), and the archiver's state
// beside it. The hub implements it on its bbolt file.
type Log interface {
	// Scan calls fn for each entry with a sequence number in (after,
	// through], in order, and stops at fn's first error, which it
	// returns. entry is valid during the call only. Entries at or below
	// the cursor of the last Save may be gone.
	Scan(after, through uint64, fn func(seq uint64, entry []byte) error) error
	// Last returns the highest sequence number the log holds or held (0:
	// none yet).
	Last() uint64
	// Schema returns the encoded Schema whose ID is id.
	Schema(id uint64) ([]byte, error)
	// State returns what Save last stored (nil: nothing yet).
	State() ([]byte, error)
	// Save stores state durably, then deletes the entries at or below
	// trim (0: none). Once Save returns, a crash leaves state; trimming
	// may be done in steps and finished by a later Save.
	Save(state []byte, trim uint64) error
}

// Options configure an Archiver; zero values mean the defaults.
type Options struct {
	Store Store // required
	Log   Log   // required
	// StagingDir is the local directory where Parquet files are built
	// before they are uploaded, and compaction spills its sorted runs.
	// Required.
	StagingDir string
	// FlushInterval: how often Run archives what the log holds (default
	// 1m). Kick flushes earlier.
	FlushInterval time.Duration
	// MaxRowsPerFile bounds a Parquet file of an append (default
	// 1,000,000); an append covers at most MaxRowsPerFlush log entries
	// (default 4 × MaxRowsPerFile).
	MaxRowsPerFile  int
	MaxRowsPerFlush int
	// NoCompaction turns hourly compaction off.
	NoCompaction bool
	// CompactionDelay: a partition is compacted once its hour ended this
	// long ago by the hub's clock (default 1h), and again when late
	// results added files to it.
	CompactionDelay time.Duration
	// CompactionMemory bounds the rows a compaction sorts in memory
	// before it spills a sorted run to StagingDir (default 64 MiB).
	CompactionMemory int64
	// Retention: partitions whose hour ended longer ago than this by the
	// hub's clock are deleted with their manifests (0: kept for ever).
	Retention time.Duration
	// Grace: files and manifests a newer generation superseded are
	// deleted this long after it (default 15m), so that a reader that
	// read the older manifest can finish.
	Grace time.Duration
	// MinBackoff and MaxBackoff bound Run's retry delay after a failed
	// step (defaults 1s and 1m; doubled per failure, jittered).
	MinBackoff, MaxBackoff time.Duration
	Now                    func() time.Time // the hub's clock (default time.Now)
	Logger                 *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.FlushInterval == 0 {
		o.FlushInterval = time.Minute
	}
	if o.MaxRowsPerFile == 0 {
		o.MaxRowsPerFile = 1_000_000
	}
	if o.MaxRowsPerFlush == 0 {
		o.MaxRowsPerFlush = 4 * o.MaxRowsPerFile
	}
	if o.CompactionDelay == 0 {
		o.CompactionDelay = time.Hour
	}
	if o.CompactionMemory == 0 {
		o.CompactionMemory = 64 << 20
	}
	if o.Grace == 0 {
		o.Grace = 15 * time.Minute
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Validate reports every problem with o at once; each matches ErrInvalid.
func (o Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("archive: options: "+format+": %w", append(args, ErrInvalid)...))
	}
	if o.Store == nil {
		add("Store is nil")
	}
	if o.Log == nil {
		add("Log is nil")
	}
	if o.StagingDir == "" {
		add("StagingDir is empty")
	}
	for name, d := range map[string]time.Duration{"FlushInterval": o.FlushInterval, "CompactionDelay": o.CompactionDelay,
		"Retention": o.Retention, "Grace": o.Grace, "MinBackoff": o.MinBackoff, "MaxBackoff": o.MaxBackoff} {
		if d < 0 {
			add("%s %v is negative", name, d)
		}
	}
	if o.MaxRowsPerFile < 0 || o.MaxRowsPerFlush < 0 {
		add("MaxRowsPerFile %d, MaxRowsPerFlush %d: negative", o.MaxRowsPerFile, o.MaxRowsPerFlush)
	}
	if o.CompactionMemory != 0 && o.CompactionMemory < 1<<20 {
		add("CompactionMemory %d is below 1 MiB", o.CompactionMemory)
	}
	if o.Retention != 0 && o.Retention < time.Hour {
		add("Retention %v is below an hour (a partition is an hour)", o.Retention)
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// Archiver moves the hub's archive log to object storage as Parquet:
// see the package documentation. Step does one round of work; Run calls
// it every FlushInterval until its context ends. One Archiver per log.
type Archiver struct {
	o    Options
	kick chan struct{}

	mu      sync.Mutex // guards st (replaced, never mutated in place, by step code) and stats
	st      *state
	stats   stats
	schemas map[uint64]*fileSchema // owned by the stepping goroutine

	stepMu sync.Mutex // one Step at a time
}

// New returns an archiver of o.Log, with its state as the log holds it.
func New(o Options) (*Archiver, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	a := &Archiver{o: o, kick: make(chan struct{}, 1), schemas: map[uint64]*fileSchema{}}
	a.stats.failures = map[string]uint64{}
	b, err := o.Log.State()
	if err != nil {
		return nil, fmt.Errorf("archive: read state: %w", err)
	}
	if b == nil {
		var id [8]byte
		_, _ = rand.Read(id[:])
		a.st = &state{Format: stateFormat, LogID: hex.EncodeToString(id[:]), Partitions: map[string]*partState{}}
		if err := o.Log.Save(a.st.encode(), 0); err != nil {
			return nil, fmt.Errorf("archive: save state: %w", err)
		}
	} else if a.st, err = decodeState(b); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StagingDir, 0o755); err != nil {
		return nil, fmt.Errorf("archive: staging dir: %w", err)
	}
	return a, nil
}

// Kick asks Run to flush now rather than at the next interval; it never
// blocks.
func (a *Archiver) Kick() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Run steps until ctx ends: every FlushInterval or Kick, and after a
// failure again after a back-off (MinBackoff doubling to MaxBackoff,
// jittered). Failures are logged and counted by cause; nothing is lost
// (the log keeps what is not archived) and the hub goes on.
func (a *Archiver) Run(ctx context.Context) error {
	failures := 0
	for {
		wait := a.o.FlushInterval
		if err := a.Step(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failures++
			wait = backoff(a.o.MinBackoff, a.o.MaxBackoff, failures)
			a.o.Logger.Warn("archive: step failed; retrying", "err", err, "cause", Cause(err), "failures", failures, "retry_in", wait)
		} else {
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-a.kick:
			t.Stop()
		case <-t.C:
		}
	}
}

// backoff is the n-th (from 1) retry delay: lo·2^(n-1) capped at hi, less
// up to a quarter at random.
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := hi
	if n < 32 {
		d = min(hi, lo<<(n-1))
	}
	return d - time.Duration(mrand.Int64N(int64(d)/4+1))
}

// Step does one round: the work a crash interrupted, then appends until
// the log is archived (MaxRowsPerFlush entries each), one compaction if
// one is due, retention and the deletion of superseded objects. It
// returns the first failure; what was done before it stays done.
func (a *Archiver) Step(ctx context.Context) error {
	a.stepMu.Lock()
	defer a.stepMu.Unlock()
	err := a.step(ctx)
	if err != nil {
		a.fail(err)
	}
	return err
}

func (a *Archiver) step(ctx context.Context) error {
	if in := a.state().Intent; in != nil {
		if err := a.resume(ctx, in); err != nil {
			return err
		}
	}
	for {
		st := a.state()
		last := a.o.Log.Last()
		if last <= st.Cursor {
			break
		}
		if err := a.appendRange(ctx, st.Cursor+1, min(last, st.Cursor+uint64(a.o.MaxRowsPerFlush))); err != nil {
			return err
		}
	}
	if !a.o.NoCompaction {
		if p := a.compactionDue(); p != "" {
			if err := a.compact(ctx, p); err != nil {
				return err
			}
		}
	}
	if err := a.retain(ctx); err != nil {
		return err
	}
	return a.collect(ctx)
}

func (a *Archiver) resume(ctx context.Context, in *intent) error {
	switch in.Cause {
	case causeAppend:
		return a.runAppend(ctx, in, nil)
	default:
		return a.runCompact(ctx, in)
	}
}

// state returns the current state; callers must not modify it.
func (a *Archiver) state() *state {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

// save stores next durably (trimming the log through trim) and makes it
// the current state.
func (a *Archiver) save(next *state, trim uint64) error {
	if err := a.o.Log.Save(next.encode(), trim); err != nil {
		return &stepError{"log", fmt.Errorf("archive: save state: %w", err)}
	}
	a.mu.Lock()
	a.st = next
	a.mu.Unlock()
	return nil
}

// clone returns a deep enough copy of st to modify: partitions are
// copied, their file lists shared until replaced.
func (st *state) clone() *state {
	c := *st
	c.Partitions = make(map[string]*partState, len(st.Partitions))
	for k, p := range st.Partitions {
		cp := *p
		c.Partitions[k] = &cp
	}
	c.GC = slices.Clone(st.GC)
	return &c
}

// schema returns the file schema of id, read from the log once.
func (a *Archiver) schema(id uint64) (*fileSchema, error) {
	if fs, ok := a.schemas[id]; ok {
		return fs, nil
	}
	b, err := a.o.Log.Schema(id)
	if err != nil {
		return nil, &stepError{"log", fmt.Errorf("archive: schema %016x: %w", id, err)}
	}
	s, err := DecodeSchema(b)
	if err != nil {
		return nil, err
	}
	if s.ID() != id {
		return nil, fmt.Errorf("archive: schema %016x decodes as %016x: %w", id, s.ID(), ErrCorrupt)
	}
	fs, err := newFileSchema(s)
	if err != nil {
		return nil, err
	}
	a.schemas[id] = fs
	return fs, nil
}

// stagePath is where the archiver builds a file before it uploads it.
func (a *Archiver) stagePath(key string) string {
	return filepath.Join(a.o.StagingDir, strings.ReplaceAll(key, "/", "_"))
}

// upload puts the staged file of f under its key; a key that exists was
// uploaded by the attempt a crash interrupted (names are unique to the
// work and the work is deterministic), and is taken as done.
func (a *Archiver) upload(ctx context.Context, f File) error {
	err := a.o.Store.PutFile(ctx, f.Path, a.stagePath(f.Path))
	if err != nil && !errors.Is(err, ErrExists) {
		return &stepError{"store", fmt.Errorf("archive: upload %s: %w", f.Path, err)}
	}
	return nil
}

// publish puts m under its key. A manifest already there is the one the
// interrupted attempt published if it lists the same files; anything else
// is ErrConflict.
func (a *Archiver) publish(ctx context.Context, m *Manifest) error {
	key := ManifestKey(m.Partition(), m.Generation)
	b := m.Encode()
	err := a.o.Store.Put(ctx, key, strings.NewReader(string(b)), int64(len(b)))
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrExists) {
		return &stepError{"store", fmt.Errorf("archive: publish %s: %w", key, err)}
	}
	old, gerr := getManifest(ctx, a.o.Store, key)
	if gerr != nil {
		return &stepError{"store", fmt.Errorf("archive: publish %s: it exists and cannot be read: %w", key, gerr)}
	}
	if !samePaths(old.Files, m.Files) || old.Log != m.Log {
		return fmt.Errorf("archive: publish %s: it exists, written by log %s with other files: %w", key, old.Log, ErrConflict)
	}
	return nil
}

func samePaths(a, b []File) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Path != b[i].Path {
			return false
		}
	}
	return true
}

// adopt returns the state of partition p: the archiver's, or for one it
// does not know (its state was lost, or another log wrote there), the
// latest manifest the store holds of it.
func (a *Archiver) adopt(ctx context.Context, st *state, p string) (*partState, error) {
	if ps, ok := st.Partitions[p]; ok {
		return ps, nil
	}
	keys, err := a.o.Store.List(ctx, p+"/"+manifestDir+"/")
	if err != nil {
		return nil, &stepError{"store", fmt.Errorf("archive: list %s: %w", p, err)}
	}
	ps := &partState{}
	if len(keys) > 0 {
		m, err := getManifest(ctx, a.o.Store, keys[len(keys)-1])
		if err != nil {
			return nil, &stepError{"store", err}
		}
		ps.Gen, ps.Files = m.Generation, m.Files
		a.o.Logger.Info("archive: partition continues another log's manifests", "partition", p, "generation", m.Generation, "log", m.Log)
	}
	st.Partitions[p] = ps
	return ps, nil
}

// retain deletes the partitions past the retention: their manifests
// first, oldest generation first (so a reader sees the newest until the
// last), then every other object of the partition.
func (a *Archiver) retain(ctx context.Context) error {
	if a.o.Retention == 0 {
		return nil
	}
	now := a.o.Now().UnixMilli()
	st := a.state()
	for _, k := range st.partitionKeys() {
		p, _ := parsePartition(k)
		if p.End()+a.o.Retention.Milliseconds() > now {
			continue
		}
		keys, err := a.o.Store.List(ctx, k+"/")
		if err != nil {
			return &stepError{"store", fmt.Errorf("archive: retention: list %s: %w", k, err)}
		}
		slices.SortStableFunc(keys, func(x, y string) int {
			mx, my := strings.Contains(x, "/"+manifestDir+"/"), strings.Contains(y, "/"+manifestDir+"/")
			switch {
			case mx && !my:
				return -1
			case my && !mx:
				return 1
			}
			return 0
		})
		for _, key := range keys {
			if err := a.o.Store.Delete(ctx, key); err != nil {
				return &stepError{"store", fmt.Errorf("archive: retention: delete %s: %w", key, err)}
			}
		}
		next := a.state().clone()
		delete(next.Partitions, k)
		next.GC = slices.DeleteFunc(next.GC, func(g gcItem) bool { return strings.HasPrefix(g.Key, k+"/") })
		next.Totals.Deleted++
		if err := a.save(next, 0); err != nil {
			return err
		}
		a.o.Logger.Info("archive: retention deleted a partition", "partition", k, "objects", len(keys))
	}
	return nil
}

// collect deletes the superseded objects whose grace has passed.
func (a *Archiver) collect(ctx context.Context) error {
	now := a.o.Now().UnixMilli()
	st := a.state()
	var done int
	for _, g := range st.GC {
		if g.After > now {
			continue
		}
		if err := a.o.Store.Delete(ctx, g.Key); err != nil {
			return &stepError{"store", fmt.Errorf("archive: delete superseded %s: %w", g.Key, err)}
		}
		done++
	}
	if done == 0 {
		return nil
	}
	next := st.clone()
	next.GC = slices.DeleteFunc(next.GC, func(g gcItem) bool { return g.After <= now })
	return a.save(next, 0)
}

// stepError carries the cause of a failure for the metrics.
type stepError struct {
	cause string
	err   error
}

func (e *stepError) Error() string { return e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// Cause names the class of a Step failure, as the failures metric counts
// it: "store" (object storage), "log" (the hub's log and state),
// "corrupt", "conflict", "local" (the staging directory), "invalid".
func Cause(err error) string {
	var se *stepError
	switch {
	case errors.Is(err, ErrCorrupt):
		return "corrupt"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.As(err, &se):
		return se.cause
	}
	return "local"
}

// name formats n zero-padded to 20 digits, so names sort as numbers.
func name(n uint64) string {
	s := strconv.FormatUint(n, 10)
	return strings.Repeat("0", 20-len(s)) + s
}
