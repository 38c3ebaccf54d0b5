package faultfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"

	"github.com/runnel-io/runnel/edge/ingestlog"
)

// ErrCrashed is returned by every operation after a simulated power loss,
// until Reboot, and by files opened before it for ever.
var ErrCrashed = errors.New("faultfs: power lost")

// Op names an operation, for injectors.
type Op uint8

// The operations an injector sees.
const (
	OpCreate Op = iota + 1
	OpOpen
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpRename
	OpRemove
	OpReadDir
	OpMkdir
	OpSyncDir
	OpLock
	OpClose
)

var opNames = [...]string{"", "create", "open", "read", "write", "sync", "truncate", "rename", "remove", "readdir", "mkdir", "syncdir", "lock", "close"}

func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// mutating ops count towards CrashAfter.
func (o Op) mutating() bool {
	switch o {
	case OpCreate, OpWrite, OpSync, OpTruncate, OpRename, OpRemove, OpSyncDir:
		return true
	}
	return false
}

// CrashMode says what a power loss does to writes not yet synced.
type CrashMode uint8

const (
	// DropUnsynced loses every unsynced write.
	DropUnsynced CrashMode = iota
	// TearUnsynced keeps a random prefix of each file's unsynced writes:
	// whole writes, then the next one cut at a random byte.
	TearUnsynced
	// TearUnsyncedZeros is TearUnsynced, with the rest of the cut write
	// reading as zeros.
	TearUnsyncedZeros

	// KeepDirChanges, or-ed into a mode, makes the creations, renames and
	// removals since the last SyncDir reach the disk too; without it they
	// are lost. Real filesystems do either, depending on timing.
	KeepDirChanges CrashMode = 0x10
)

func (m CrashMode) String() string {
	var s string
	switch m &^ KeepDirChanges {
	case DropUnsynced:
		s = "drop"
	case TearUnsynced:
		s = "tear"
	case TearUnsyncedZeros:
		s = "tear-zeros"
	default:
		return fmt.Sprintf("CrashMode(%#x)", uint8(m))
	}
	if m&KeepDirChanges != 0 {
		s += "+dirs"
	}
	return s
}

// FS is the in-memory filesystem. Its zero value is not usable; call New.
type FS struct {
	mu       sync.Mutex
	rng      *rand.Rand
	files    map[string]*node // what the process sees
	durable  map[string]*node // directory entries a power loss keeps
	dirs     map[string]bool
	locks    map[string]bool
	inject   func(op Op, name string) error
	crashIn  int // mutating ops until the scheduled crash; 0 = none
	mode     CrashMode
	crashed  bool
	image    map[string][]byte
	gen      int // bumped by Reboot: files opened before are dead
	mutating int // mutating operations so far
}

type node struct {
	data    []byte    // what reads see
	synced  []byte    // what a power loss keeps, before pending ops
	pending []pending // unsynced writes and truncations, in order
}

type pending struct {
	off      int64
	data     []byte
	truncate bool
	size     int64
}

// New returns an empty FS whose random choices (short writes, tears) follow
// seed.
func New(seed uint64) *FS {
	return &FS{
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		files:   map[string]*node{},
		durable: map[string]*node{},
		dirs:    map[string]bool{},
		locks:   map[string]bool{},
	}
}

var _ ingestlog.FS = (*FS)(nil)

// SetInjector installs f (nil removes it). f is called before every
// operation with the file name; a non-nil error fails the operation.
func (fsys *FS) SetInjector(f func(op Op, name string) error) {
	fsys.mu.Lock()
	fsys.inject = f
	fsys.mu.Unlock()
}

// CrashAfter schedules a power loss at the n-th mutating operation (create,
// write, sync, truncate, rename, remove, syncdir) from now, n >= 1. That
// operation fails; a write that hits it is itself unsynced and can be torn.
func (fsys *FS) CrashAfter(n int, mode CrashMode) {
	fsys.mu.Lock()
	fsys.crashIn, fsys.mode = max(n, 1), mode
	fsys.mu.Unlock()
}

// Crash loses power now.
func (fsys *FS) Crash(mode CrashMode) {
	fsys.mu.Lock()
	fsys.mode = mode
	fsys.crashLocked()
	fsys.mu.Unlock()
}

// Crashed reports whether the FS has lost power and not been rebooted.
func (fsys *FS) Crashed() bool {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	return fsys.crashed
}

// Mutations returns how many mutating operations have run so far.
func (fsys *FS) Mutations() int {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	return fsys.mutating
}

// Reboot installs what the power loss left, and drops every lock and open
// file. It loses power first (DropUnsynced) if that has not happened.
func (fsys *FS) Reboot() {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if !fsys.crashed {
		fsys.mode = DropUnsynced
		fsys.crashLocked()
	}
	fsys.files = map[string]*node{}
	fsys.durable = map[string]*node{}
	for name, data := range fsys.image {
		n := &node{data: data, synced: slices.Clone(data)}
		fsys.files[name] = n
		fsys.durable[name] = n
	}
	fsys.image = nil
	fsys.locks = map[string]bool{}
	fsys.crashed = false
	fsys.crashIn = 0
	fsys.gen++
}

func (fsys *FS) crashLocked() {
	if fsys.crashed {
		return
	}
	fsys.crashed = true
	fsys.crashIn = 0
	fsys.image = map[string][]byte{}
	entries := fsys.durable
	if fsys.mode&KeepDirChanges != 0 {
		entries = fsys.files
	}
	// In name order, so that the tears follow the seed.
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		fsys.image[name] = fsys.survivorLocked(entries[name])
	}
}

// survivorLocked is what of n a power loss keeps.
func (fsys *FS) survivorLocked(n *node) []byte {
	data := slices.Clone(n.synced)
	mode := fsys.mode &^ KeepDirChanges
	if mode == DropUnsynced {
		return data
	}
	total := 0
	for _, p := range n.pending {
		total += len(p.data)
	}
	cut := fsys.rng.IntN(total + 1)
	for _, p := range n.pending {
		if p.truncate {
			data = resize(data, p.size)
			continue
		}
		if cut >= len(p.data) {
			data = writeAt(data, p.data, p.off)
			cut -= len(p.data)
			continue
		}
		data = writeAt(data, p.data[:cut], p.off)
		if mode == TearUnsyncedZeros {
			data = writeAt(data, make([]byte, len(p.data)-cut), p.off+int64(cut))
		}
		break
	}
	return data
}

func resize(b []byte, size int64) []byte {
	if int64(len(b)) >= size {
		return b[:size]
	}
	return append(b, make([]byte, size-int64(len(b)))...)
}

func writeAt(b, p []byte, off int64) []byte {
	if end := off + int64(len(p)); end > int64(len(b)) {
		b = resize(b, end)
	}
	copy(b[off:], p)
	return b
}

// op runs the injector and the crash schedule for one operation, then takes
// the lock. On error the lock is not held.
func (fsys *FS) op(op Op, name string, gen int) error {
	fsys.mu.Lock()
	inject := fsys.inject
	fsys.mu.Unlock()
	if inject != nil {
		if err := inject(op, name); err != nil {
			if op == OpWrite {
				return &injected{err}
			}
			return fmt.Errorf("faultfs: %s %s: %w", op, name, err)
		}
	}
	fsys.mu.Lock()
	if fsys.crashed || (gen >= 0 && gen != fsys.gen) {
		fsys.mu.Unlock()
		return fmt.Errorf("faultfs: %s %s: %w", op, name, ErrCrashed)
	}
	if op.mutating() {
		fsys.mutating++
		if fsys.crashIn > 0 {
			fsys.crashIn--
			if fsys.crashIn == 0 {
				return &crashNow{} // the caller decides what lands, then crashes
			}
		}
	}
	return nil
}

// injected marks an injected write error: the lock is not held and the write
// lands a random prefix.
type injected struct{ err error }

func (e *injected) Error() string { return e.err.Error() }

// crashNow says the scheduled crash is this operation. The lock is held.
type crashNow struct{}

func (*crashNow) Error() string { return "crash now" }

// begin is op for operations that do nothing special at a crash.
func (fsys *FS) begin(op Op, name string, gen int) error {
	err := fsys.op(op, name, gen)
	if _, ok := err.(*crashNow); ok {
		fsys.crashLocked()
		fsys.mu.Unlock()
		return fmt.Errorf("faultfs: %s %s: %w", op, name, ErrCrashed)
	}
	if ie, ok := err.(*injected); ok {
		return fmt.Errorf("faultfs: %s %s: %w", op, name, ie.err)
	}
	return err
}

// Create implements ingestlog.FS.
func (fsys *FS) Create(name string) (ingestlog.File, error) {
	if err := fsys.begin(OpCreate, name, -1); err != nil {
		return nil, err
	}
	defer fsys.mu.Unlock()
	if !fsys.dirs[filepath.Dir(name)] {
		return nil, &fs.PathError{Op: "create", Path: name, Err: fs.ErrNotExist}
	}
	n := &node{}
	fsys.files[name] = n
	return &file{fsys: fsys, n: n, name: name, gen: fsys.gen, writable: true}, nil
}

// Open implements ingestlog.FS.
func (fsys *FS) Open(name string) (ingestlog.File, error) {
	return fsys.open(OpOpen, name, false)
}

// OpenReadWrite implements ingestlog.FS.
func (fsys *FS) OpenReadWrite(name string) (ingestlog.File, error) {
	return fsys.open(OpOpen, name, true)
}

func (fsys *FS) open(op Op, name string, writable bool) (ingestlog.File, error) {
	if err := fsys.begin(op, name, -1); err != nil {
		return nil, err
	}
	defer fsys.mu.Unlock()
	n, ok := fsys.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &file{fsys: fsys, n: n, name: name, gen: fsys.gen, writable: writable}, nil
}

// Remove implements ingestlog.FS.
func (fsys *FS) Remove(name string) error {
	if err := fsys.begin(OpRemove, name, -1); err != nil {
		return err
	}
	defer fsys.mu.Unlock()
	if _, ok := fsys.files[name]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(fsys.files, name)
	return nil
}

// Rename implements ingestlog.FS.
func (fsys *FS) Rename(oldname, newname string) error {
	if err := fsys.begin(OpRename, oldname, -1); err != nil {
		return err
	}
	defer fsys.mu.Unlock()
	n, ok := fsys.files[oldname]
	if !ok {
		return &fs.PathError{Op: "rename", Path: oldname, Err: fs.ErrNotExist}
	}
	delete(fsys.files, oldname)
	fsys.files[newname] = n
	return nil
}

// ReadDir implements ingestlog.FS.
func (fsys *FS) ReadDir(dir string) ([]string, error) {
	if err := fsys.begin(OpReadDir, dir, -1); err != nil {
		return nil, err
	}
	defer fsys.mu.Unlock()
	if !fsys.dirs[filepath.Clean(dir)] {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: fs.ErrNotExist}
	}
	var names []string
	for name := range fsys.files {
		if filepath.Dir(name) == filepath.Clean(dir) {
			names = append(names, filepath.Base(name))
		}
	}
	slices.Sort(names)
	return names, nil
}

// MkdirAll implements ingestlog.FS. Directories are durable at once.
func (fsys *FS) MkdirAll(dir string) error {
	if err := fsys.begin(OpMkdir, dir, -1); err != nil {
		return err
	}
	defer fsys.mu.Unlock()
	for d := filepath.Clean(dir); !fsys.dirs[d]; d = filepath.Dir(d) {
		fsys.dirs[d] = true
	}
	return nil
}

// SyncDir implements ingestlog.FS: the entries of dir become durable.
func (fsys *FS) SyncDir(dir string) error {
	if err := fsys.begin(OpSyncDir, dir, -1); err != nil {
		return err
	}
	defer fsys.mu.Unlock()
	dir = filepath.Clean(dir)
	for name := range fsys.durable {
		if filepath.Dir(name) == dir {
			delete(fsys.durable, name)
		}
	}
	for name, n := range fsys.files {
		if filepath.Dir(name) == dir {
			fsys.durable[name] = n
		}
	}
	return nil
}

// Lock implements ingestlog.FS.
func (fsys *FS) Lock(name string) (io.Closer, error) {
	if err := fsys.begin(OpLock, name, -1); err != nil {
		return nil, err
	}
	defer fsys.mu.Unlock()
	if fsys.locks[name] {
		return nil, fmt.Errorf("%s: %w", name, ingestlog.ErrLocked)
	}
	fsys.locks[name] = true
	return &lock{fsys: fsys, name: name, gen: fsys.gen}, nil
}

type lock struct {
	fsys *FS
	name string
	gen  int
	once sync.Once
}

func (l *lock) Close() error {
	l.once.Do(func() {
		l.fsys.mu.Lock()
		if l.fsys.gen == l.gen {
			delete(l.fsys.locks, l.name)
		}
		l.fsys.mu.Unlock()
	})
	return nil
}

// ReadFile returns a copy of what the process sees in name. It ignores the
// injector and works after a crash (on the pre-crash view).
func (fsys *FS) ReadFile(name string) ([]byte, error) {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	n, ok := fsys.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	return slices.Clone(n.data), nil
}

// WriteFile replaces name's contents with data, durably, creating the file
// and its directory. For setting up and damaging test logs.
func (fsys *FS) WriteFile(name string, data []byte) {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	for d := filepath.Dir(name); !fsys.dirs[d]; d = filepath.Dir(d) {
		fsys.dirs[d] = true
	}
	n := &node{data: slices.Clone(data), synced: slices.Clone(data)}
	fsys.files[name] = n
	fsys.durable[name] = n
}

// file is an open file. Its operations fail once the FS has crashed or
// rebooted since it was opened.
type file struct {
	fsys     *FS
	n        *node
	name     string
	gen      int
	writable bool
	closed   bool
}

func (f *file) check(op Op) error {
	if f.closed {
		f.fsys.mu.Unlock()
		return fmt.Errorf("faultfs: %s %s: %w", op, f.name, fs.ErrClosed)
	}
	if !f.writable && (op == OpWrite || op == OpTruncate) {
		f.fsys.mu.Unlock()
		return fmt.Errorf("faultfs: %s %s: file is read-only", op, f.name)
	}
	return nil
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fsys.begin(OpRead, f.name, f.gen); err != nil {
		return 0, err
	}
	if err := f.check(OpRead); err != nil {
		return 0, err
	}
	defer f.fsys.mu.Unlock()
	if off < 0 {
		return 0, fmt.Errorf("faultfs: read %s: negative offset %d", f.name, off)
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	k := copy(p, f.n.data[off:])
	if k < len(p) {
		return k, io.EOF
	}
	return k, nil
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	err := f.fsys.op(OpWrite, f.name, f.gen)
	var ie *injected
	switch e := err.(type) {
	case nil:
	case *crashNow:
		// The write that the power loss interrupts: it may be torn.
		f.n.write(slices.Clone(p), off)
		f.fsys.crashLocked()
		f.fsys.mu.Unlock()
		return 0, fmt.Errorf("faultfs: write %s: %w", f.name, ErrCrashed)
	case *injected:
		ie = e
		f.fsys.mu.Lock()
		if f.fsys.crashed || f.gen != f.fsys.gen {
			f.fsys.mu.Unlock()
			return 0, fmt.Errorf("faultfs: write %s: %w", f.name, ErrCrashed)
		}
	default:
		return 0, err
	}
	if err := f.check(OpWrite); err != nil {
		return 0, err
	}
	defer f.fsys.mu.Unlock()
	if ie != nil {
		k := f.fsys.rng.IntN(len(p) + 1)
		if k == len(p) && k > 0 {
			k--
		}
		f.n.write(slices.Clone(p[:k]), off)
		return k, fmt.Errorf("faultfs: write %s: %w", f.name, ie.err)
	}
	f.n.write(slices.Clone(p), off)
	return len(p), nil
}

func (n *node) write(p []byte, off int64) {
	n.data = writeAt(n.data, p, off)
	n.pending = append(n.pending, pending{off: off, data: p})
}

func (f *file) Sync() error {
	if err := f.fsys.begin(OpSync, f.name, f.gen); err != nil {
		return err
	}
	if err := f.check(OpSync); err != nil {
		return err
	}
	defer f.fsys.mu.Unlock()
	f.n.synced = append(f.n.synced[:0], f.n.data...)
	f.n.pending = f.n.pending[:0]
	return nil
}

func (f *file) Truncate(size int64) error {
	if err := f.fsys.begin(OpTruncate, f.name, f.gen); err != nil {
		return err
	}
	if err := f.check(OpTruncate); err != nil {
		return err
	}
	defer f.fsys.mu.Unlock()
	f.n.data = resize(f.n.data, size)
	f.n.pending = append(f.n.pending, pending{truncate: true, size: size})
	return nil
}

func (f *file) Size() (int64, error) {
	if err := f.fsys.begin(OpRead, f.name, f.gen); err != nil {
		return 0, err
	}
	if err := f.check(OpRead); err != nil {
		return 0, err
	}
	defer f.fsys.mu.Unlock()
	return int64(len(f.n.data)), nil
}

func (f *file) Close() error {
	f.fsys.mu.Lock()
	defer f.fsys.mu.Unlock()
	if f.closed {
		return fmt.Errorf("faultfs: close %s: %w", f.name, fs.ErrClosed)
	}
	f.closed = true
	return nil
}
