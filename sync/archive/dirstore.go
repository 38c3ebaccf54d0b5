package archive

import (
	"context"
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
)

// DirStore is a Store in a local directory: one file per object, at the
// key's path below the root. It is what an archive URL of file:///dir
// opens, and what the tests use beside the real S3 server.
//
// A Put writes a temporary file under the root's .tmp directory, syncs
// it, and links it to the key's path: the link fails if the key exists
// (ErrExists), so an object is never overwritten and never seen half
// written. The directory is synced after the link. Temporary files left
// by a crash are removed by OpenDir.
type DirStore struct {
	root string
}

// tmpDir is where DirStore writes objects before they get their key; List
// never returns it.
const tmpDir = ".tmp"

// OpenDir opens (creating it if needed) the directory store rooted at dir
// and removes the temporary files a crash may have left.
func OpenDir(dir string) (*DirStore, error) {
	if err := os.MkdirAll(filepath.Join(dir, tmpDir), 0o755); err != nil {
		return nil, fmt.Errorf("archive: open %s: %w", dir, err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, tmpDir))
	if err != nil {
		return nil, fmt.Errorf("archive: open %s: %w", dir, err)
	}
	for _, e := range ents {
		_ = os.Remove(filepath.Join(dir, tmpDir, e.Name()))
	}
	return &DirStore{root: dir}, nil
}

// OpenURL opens the store an archive URL names. Only file:// URLs are
// handled here (file:///var/lib/runnel/archive); s3:// is opened by the
// caller (cmd/runnel-hub, through sync/objstore) and passed in Options.
func OpenURL(raw string) (*DirStore, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("archive: url %q: %w", raw, err)
	}
	if u.Scheme != "file" || u.Host != "" && u.Host != "localhost" || u.Path == "" {
		return nil, fmt.Errorf("archive: url %q: want file:///absolute/dir", raw)
	}
	return OpenDir(filepath.FromSlash(u.Path))
}

// Root returns the directory the store is rooted at.
func (d *DirStore) Root() string { return d.root }

// checkKey refuses keys that would leave the root or name the temporary
// directory.
func checkKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") || path.Clean(key) != key ||
		key == ".." || strings.HasPrefix(key, "../") || key == tmpDir || strings.HasPrefix(key, tmpDir+"/") {
		return fmt.Errorf("archive: bad object key %q", key)
	}
	return nil
}

func (d *DirStore) file(key string) string { return filepath.Join(d.root, filepath.FromSlash(key)) }

// Put implements Store.
func (d *DirStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Join(d.root, tmpDir), "put-*")
	if err != nil {
		return fmt.Errorf("archive: put %s: %w", key, err)
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, r)
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("read %d bytes, want %d", n, size)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("archive: put %s: %w", key, err)
	}
	final := d.file(key)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fmt.Errorf("archive: put %s: %w", key, err)
	}
	if err := os.Link(tmp.Name(), final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("archive: put %s: %w", key, ErrExists)
		}
		return fmt.Errorf("archive: put %s: %w", key, err)
	}
	return syncDir(filepath.Dir(final))
}

// PutFile implements Store.
func (d *DirStore) PutFile(ctx context.Context, key, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("archive: put %s: %w", key, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("archive: put %s: %w", key, err)
	}
	return d.Put(ctx, key, f, st.Size())
}

// Get implements Store.
func (d *DirStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(d.file(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("archive: get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("archive: get %s: %w", key, err)
	}
	return f, nil
}

// List implements Store.
func (d *DirStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Walk from the deepest directory the prefix names whole.
	start := d.root
	if i := strings.LastIndexByte(prefix, '/'); i > 0 {
		start = filepath.Join(d.root, filepath.FromSlash(prefix[:i]))
	}
	var keys []string
	err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, rerr := filepath.Rel(d.root, p)
		if rerr != nil {
			return rerr
		}
		rel = filepath.ToSlash(rel)
		if e.IsDir() {
			if rel == tmpDir {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(rel, prefix) {
			keys = append(keys, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("archive: list %q: %w", prefix, err)
	}
	slices.Sort(keys)
	return keys, nil
}

// Delete implements Store.
func (d *DirStore) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := os.Remove(d.file(key))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("archive: delete %s: %w", key, err)
	}
	// Empty partition directories go with their last object.
	for dir := filepath.Dir(d.file(key)); dir != d.root && strings.HasPrefix(dir, d.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.Join(err, f.Close())
}
