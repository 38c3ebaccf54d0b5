package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Store is where snapshots go: a flat space of keys (slash-separated, like
// object storage), written once. sync/objstore's Bucket has this method
// set, with its own "not found" and "exists" errors, which the wiring maps
// to ErrNotFound and ErrExists; DirStore is a local directory.
type Store interface {
	// Put stores the size bytes r yields under key, whole or not at all
	// (a reader never sees part of an object). It never overwrites: a
	// key that exists gives an error matching ErrExists.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens the object under key; a missing one gives an error
	// matching ErrNotFound. The caller closes it.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns the keys that start with prefix, as Get takes them
	// (not cut to the prefix), in byte order.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete deletes the object under key. A missing one is no error, or
	// an error matching ErrNotFound.
	Delete(ctx context.Context, key string) error
}

// FilePutter is a Store that uploads a local file itself (sync/objstore
// does it in parts, resuming after a crash). Snapshots use it when the
// store has it.
type FilePutter interface {
	PutFile(ctx context.Context, key, path string) error
}

// Opener opens the store a URL names.
type Opener func(u *url.URL) (Store, error)

// OpenStore opens the snapshot store rawURL names: file:///path, or a
// plain path, is a DirStore; another scheme (s3://bucket/prefix) is opened
// by the Opener schemes has for it. It does not touch the store.
func OpenStore(rawURL string, schemes map[string]Opener) (Store, error) {
	if rawURL == "" {
		return nil, errorf(ErrStoreURL, "checkpoint: empty snapshot store URL")
	}
	if !strings.Contains(rawURL, "://") {
		return NewDirStore(rawURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errorf(ErrStoreURL, "checkpoint: snapshot store URL: %v", err)
	}
	shown := u.Redacted()
	switch {
	case u.Scheme == "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, errorf(ErrStoreURL, "checkpoint: snapshot store %s: a file URL names a local path (file:///path), not host %q", shown, u.Host)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return nil, errorf(ErrStoreURL, "checkpoint: snapshot store %s: a file URL has no query or fragment", shown)
		}
		return NewDirStore(u.Path)
	case schemes[u.Scheme] != nil:
		return schemes[u.Scheme](u)
	}
	return nil, errorf(ErrStoreURL, "checkpoint: snapshot store %s: scheme %q is not supported by this build (file:// or a path; %s)", shown, u.Scheme, knownSchemes(schemes))
}

func knownSchemes(schemes map[string]Opener) string {
	var names []string
	for s, o := range schemes {
		if o != nil {
			names = append(names, s+"://")
		}
	}
	if len(names) == 0 {
		return "no other scheme is wired in"
	}
	slices.Sort(names)
	return "also " + strings.Join(names, ", ")
}

// DirStore is a Store in a local directory: each key is a file under it
// (key "a/b/c" is root/a/b/c). Put writes a temporary file beside the
// final one, fsyncs it, links it into place (which fails if the key
// exists: never an overwrite) and fsyncs the directory, so a crash leaves
// either no object or the whole one, and at most a temporary file, which
// List skips. Nothing is created until the first Put.
type DirStore struct {
	root string
}

// NewDirStore returns the DirStore rooted at dir (made absolute).
func NewDirStore(dir string) (*DirStore, error) {
	if dir == "" {
		return nil, errorf(ErrStoreURL, "checkpoint: empty snapshot directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, errorf(ErrStoreURL, "checkpoint: snapshot directory %s: %v", dir, err)
	}
	return &DirStore{root: abs}, nil
}

// Root returns the store's directory.
func (d *DirStore) Root() string { return d.root }

// tmpMark is in the name of every temporary file: List skips them.
const tmpMark = ".tmp-"

// path checks key and returns its file.
func (d *DirStore) path(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.ContainsAny(key, "\\\x00") || path.Clean(key) != key ||
		slices.Contains(strings.Split(key, "/"), "..") || strings.Contains(path.Base(key), tmpMark) {
		return "", fmt.Errorf("checkpoint: directory store %s: invalid key %q", d.root, key)
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// Put stores r under key; see DirStore. size < 0 takes whatever r yields.
func (d *DirStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("checkpoint: directory store: put %s: %w", p, ErrExists)
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: directory store: put %s: %w", p, err)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, "."+filepath.Base(p)+tmpMark+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: directory store: put %s: %w", p, err)
	}
	defer os.Remove(tmp)
	src := r
	if size >= 0 {
		src = io.LimitReader(r, size+1)
	}
	n, err := io.Copy(f, ctxReader{ctx, src})
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("the reader gave %d bytes, not %d", n, size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("checkpoint: directory store: put %s: %w", p, err)
	}
	if err := os.Link(tmp, p); err != nil {
		switch {
		case errors.Is(err, fs.ErrExist):
			return fmt.Errorf("checkpoint: directory store: put %s: %w", p, ErrExists)
		case errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EXDEV):
			// No hard links here (FAT, some network filesystems): a
			// rename, after the check above. One writer per key (one
			// edge) keeps that safe.
			if err := os.Rename(tmp, p); err != nil {
				return fmt.Errorf("checkpoint: directory store: put %s: %w", p, err)
			}
		default:
			return fmt.Errorf("checkpoint: directory store: put %s: %w", p, err)
		}
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("checkpoint: directory store: put %s: %w", p, err)
	}
	return nil
}

// PutFile stores the file at path under key.
func (d *DirStore) PutFile(ctx context.Context, key, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("checkpoint: directory store: put %s: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: directory store: put %s: %w", key, err)
	}
	return d.Put(ctx, key, f, fi.Size())
}

// Get opens the object under key.
func (d *DirStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: directory store: %s: %w", p, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: directory store: %w", err)
	}
	return f, nil
}

// List returns the keys that start with prefix, in byte order, without
// temporary files.
func (d *DirStore) List(ctx context.Context, prefix string) ([]string, error) {
	// Walk from the deepest directory the prefix names whole.
	base := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base = prefix[:i]
	}
	start := filepath.Join(d.root, filepath.FromSlash(base))
	var keys []string
	err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.IsDir() || strings.Contains(e.Name(), tmpMark) {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		if k := filepath.ToSlash(rel); strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: directory store: list %s: %w", start, err)
	}
	slices.Sort(keys)
	return keys, nil
}

// Delete deletes the object under key, and the directories above it that
// it leaves empty (up to the store's root).
func (d *DirStore) Delete(ctx context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoint: directory store: %w", err)
	}
	for dir := filepath.Dir(p); dir != d.root && strings.HasPrefix(dir, d.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil { // not empty (or gone): stop
			break
		}
	}
	return nil
}

// syncDir fsyncs a directory, so that the names in it are durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// ctxReader stops a copy when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
