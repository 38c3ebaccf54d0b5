package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Store is the object storage the archive writes to: the handful of
// methods of *objstore.Bucket (and objstore.Mem), so that either plugs in
// as it is behind Adapt. Keys are relative to the store's root (the
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

// Errors of a Store, as the archive sees them. Adapt maps another
// implementation's sentinels onto these.
var (
	// ErrExists: Put or PutFile of a key that exists; nothing was written.
	ErrExists = errors.New("archive: object exists")
	// ErrNotFound: Get of a key that does not exist.
	ErrNotFound = errors.New("archive: object not found")
)

// Adapt returns s with its errors mapped: an error matching exists also
// matches ErrExists, one matching notFound also ErrNotFound (the original
// error is kept in the chain, for its message). This is the hook for
// sync/objstore:
//
//	archive.Adapt(bucket, objstore.ErrExists, objstore.ErrNotFound)
func Adapt(s Store, exists, notFound error) Store {
	return adapted{s, exists, notFound}
}

type adapted struct {
	s                Store
	exists, notFound error
}

func (a adapted) mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case a.exists != nil && errors.Is(err, a.exists) && !errors.Is(err, ErrExists):
		return fmt.Errorf("%w (%w)", ErrExists, err)
	case a.notFound != nil && errors.Is(err, a.notFound) && !errors.Is(err, ErrNotFound):
		return fmt.Errorf("%w (%w)", ErrNotFound, err)
	}
	return err
}

func (a adapted) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return a.mapErr(a.s.Put(ctx, key, r, size))
}

func (a adapted) PutFile(ctx context.Context, key, path string) error {
	return a.mapErr(a.s.PutFile(ctx, key, path))
}

func (a adapted) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := a.s.Get(ctx, key)
	return rc, a.mapErr(err)
}

func (a adapted) List(ctx context.Context, prefix string) ([]string, error) {
	ks, err := a.s.List(ctx, prefix)
	return ks, a.mapErr(err)
}

func (a adapted) Delete(ctx context.Context, key string) error {
	return a.mapErr(a.s.Delete(ctx, key))
}
