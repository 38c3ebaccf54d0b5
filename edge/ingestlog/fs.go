package ingestlog

import (
	"io"
	"os"
)

// FS is the filesystem a Log lives on: the operations the log needs and no
// more, so that tests can swap in a fault-injecting one (package
// edge/ingestlog/faultfs). Names are full paths. Implementations must be
// safe for concurrent use: the committer writes while readers read.
type FS interface {
	// Create creates name, or truncates it, and opens it read-write.
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file read-write without truncating it.
	OpenReadWrite(name string) (File, error)
	Remove(name string) error
	Rename(oldname, newname string) error
	// ReadDir lists the names (not paths) of the entries of dir.
	ReadDir(dir string) ([]string, error)
	MkdirAll(dir string) error
	// SyncDir makes the creations, renames and removals of entries in dir
	// durable.
	SyncDir(dir string) error
	// Lock takes an exclusive lock on name, creating the file, or fails
	// with an error wrapping ErrLocked when someone holds it. Closing the
	// returned Closer releases it.
	Lock(name string) (io.Closer, error)
}

// File is an open file of an FS. The log writes with WriteAt at offsets it
// tracks itself and never relies on a file position.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the data written so far, and the file's length, durable
	// (fdatasync on Linux, fsync elsewhere).
	Sync() error
	Truncate(size int64) error
	Size() (int64, error)
}

// OSFS returns the operating system's filesystem.
func OSFS() FS { return osFS{} }

type osFS struct{}

type osFile struct{ *os.File }

func (f osFile) Sync() error { return datasync(f.File) }

func (f osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) OpenReadWrite(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string) error            { return os.MkdirAll(dir, 0o755) }

func (osFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (osFS) Lock(name string) (io.Closer, error) { return lockFile(name) }
