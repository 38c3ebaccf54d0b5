package archive

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"path/filepath"

	"github.com/runnel-io/runnel/checkpoint"
)

// Store is the object storage the archive writes to: the handful of
// methods of *objstore.Bucket (and objstore.Mem), so that either plugs in
// as it is. Keys are relative to the store's root (the
// archive URL's prefix) and use '/' as the separator.
//
// Put and PutFile never overwrite: a key that exists fails with an error
// matching ErrExists, and what is there is left as it was. An object is
// either absent or whole: readers never see part of one.
type Store interface {
	// Put uploads size bytes of r (size -1: unknown) under key.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// PutFile uploads the file at path under key (multipart for large
	// files; an implementation may resume an interrupted upload).
	PutFile(ctx context.Context, key, path string) error
	// Get opens the object under key; a missing one matches ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns the keys that begin with prefix, sorted, recursively.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// Errors of a Store: those of checkpoint.Store, which every store of the
// cold tier shares (checkpoint.DirStore, and sync/objstore's Bucket,
// whose errors match them).
var (
	// ErrExists: Put or PutFile of a key that exists; nothing was written.
	ErrExists = checkpoint.ErrExists
	// ErrNotFound: Get of a key that does not exist.
	ErrNotFound = checkpoint.ErrNotFound
)

// OpenDir opens a directory as a Store (checkpoint.DirStore: a temporary
// file, fsync, linked into place, so an object is never overwritten nor
// seen half written).
func OpenDir(dir string) (*checkpoint.DirStore, error) { return checkpoint.NewDirStore(dir) }

// OpenURL opens the store a file:// archive URL names
// (file:///var/lib/runnel/archive); s3:// is opened by the caller
// (cmd/runnel-hub, through sync/objstore) and passed in Options.
func OpenURL(raw string) (*checkpoint.DirStore, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("archive: url %q: %w", raw, err)
	}
	if u.Scheme != "file" || u.Host != "" && u.Host != "localhost" || u.Path == "" {
		return nil, fmt.Errorf("archive: url %q: want file:///absolute/dir", raw)
	}
	return OpenDir(filepath.FromSlash(u.Path))
}
