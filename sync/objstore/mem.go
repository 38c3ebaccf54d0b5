package objstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Mem is an in-memory object store with the Bucket's methods and
// semantics (never overwrite, ErrExists, ErrNotFound, sorted recursive
// List, idempotent Delete, the same key rules and errors), for unit tests
// of the packages that use object storage. SetFault injects failures.
// Its methods are safe for concurrent use.
type Mem struct {
	mu      sync.Mutex
	objects map[string]memObject
	fault   func(op, key string) error
	closed  bool
	st      stats
}

type memObject struct {
	data     []byte
	etag     string
	modified time.Time
}

// NewMem returns an empty Mem.
func NewMem() *Mem {
	m := &Mem{objects: map[string]memObject{}}
	m.st.init()
	return m
}

// SetFault makes every later call first ask f(op, key) — op as in
// Error.Op ("put", "put-file", "get", "stat", "list", "delete"); key the
// key, or the prefix for list — and fail with what it returns, when not
// nil. Return an *Error to pick the class (a Cause) the caller sees;
// other errors come back wrapped with CauseOther. nil f removes the fault.
func (m *Mem) SetFault(f func(op, key string) error) {
	m.mu.Lock()
	m.fault = f
	m.mu.Unlock()
}

func (m *Mem) err(op, key string, cause Cause, err error) error {
	m.st.failed(cause)
	return &Error{Op: op, Bucket: "mem", Key: key, Cause: cause, Attempts: 1, Err: err}
}

// enter checks the key, Close and the fault; m.mu must be held.
func (m *Mem) enter(op, key string, isKey bool) error {
	if m.closed {
		return m.err(op, key, CauseOther, ErrClosed)
	}
	if isKey {
		if problem := checkKey(key); problem != "" {
			return m.err(op, key, CauseOther, fmt.Errorf("key %q: %w: %s", key, ErrInvalidKey, problem))
		}
	} else if !validPrefix(key) {
		return m.err(op, key, CauseOther, fmt.Errorf("prefix %q: %w", key, ErrInvalidKey))
	}
	if m.fault != nil {
		if err := m.fault(op, key); err != nil {
			if e, ok := err.(*Error); ok {
				m.st.failed(e.Cause)
				return e
			}
			return m.err(op, key, CauseOther, err)
		}
	}
	return nil
}

// Put stores r's size bytes (-1: all of r) under key; ErrExists if the key
// exists.
func (m *Mem) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	const op = "put"
	m.mu.Lock()
	err := m.enter(op, key, true)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return m.err(op, key, CauseCanceled, err)
	}
	if size < -1 {
		return m.err(op, key, CauseOther, fmt.Errorf("size %d: want -1 (unknown) or the byte count", size))
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return m.err(op, key, CauseOther, fmt.Errorf("read: %w", err))
	}
	if size >= 0 && int64(len(data)) != size {
		return m.err(op, key, CauseOther, fmt.Errorf("reader gave %d bytes, size=%d", len(data), size))
	}
	return m.store(op, key, data, false)
}

// PutFile stores the file at path under key. Like Bucket.PutFile, a key
// that already holds exactly the file's bytes is success; other contents
// are ErrExists.
func (m *Mem) PutFile(ctx context.Context, key, path string) error {
	const op = "put-file"
	m.mu.Lock()
	err := m.enter(op, key, true)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return m.err(op, key, CauseCanceled, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return m.err(op, key, CauseOther, err)
	}
	return m.store(op, key, data, true)
}

func (m *Mem) store(op, key string, data []byte, sameIsOK bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.objects[key]; ok {
		if sameIsOK && bytes.Equal(o.data, data) {
			return nil
		}
		m.st.failed(CauseExists)
		return &Error{Op: op, Bucket: "mem", Key: key, Cause: CauseExists, Code: "PreconditionFailed", Status: 412, Attempts: 1}
	}
	sum := md5.Sum(data)
	m.objects[key] = memObject{data: data, etag: hex.EncodeToString(sum[:]), modified: time.Now()}
	m.st.uploaded(int64(len(data)), true)
	return nil
}

// Get returns the object's bytes; ErrNotFound if there is none.
func (m *Mem) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	const op = "get"
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.enter(op, key, true); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, m.err(op, key, CauseCanceled, err)
	}
	o, ok := m.objects[key]
	if !ok {
		return nil, m.err(op, key, CauseNotFound, nil)
	}
	m.st.downloaded(int64(len(o.data)))
	return io.NopCloser(bytes.NewReader(o.data)), nil
}

// Stat describes the object; ErrNotFound if there is none.
func (m *Mem) Stat(ctx context.Context, key string) (Object, error) {
	const op = "stat"
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.enter(op, key, true); err != nil {
		return Object{}, err
	}
	if err := ctx.Err(); err != nil {
		return Object{}, m.err(op, key, CauseCanceled, err)
	}
	o, ok := m.objects[key]
	if !ok {
		return Object{}, m.err(op, key, CauseNotFound, nil)
	}
	return Object{Key: key, Size: int64(len(o.data)), ETag: o.etag, Modified: o.modified}, nil
}

// List returns the keys starting with prefix, sorted.
func (m *Mem) List(ctx context.Context, prefix string) ([]string, error) {
	const op = "list"
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.enter(op, prefix, false); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, m.err(op, prefix, CauseCanceled, err)
	}
	var keys []string
	for k := range m.objects {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// Delete removes the object; a missing key is not an error.
func (m *Mem) Delete(ctx context.Context, key string) error {
	const op = "delete"
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.enter(op, key, true); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return m.err(op, key, CauseCanceled, err)
	}
	delete(m.objects, key)
	return nil
}

// Close makes every later call fail with ErrClosed.
func (m *Mem) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

// Stats returns a snapshot of the Mem's counters (no upload is ever in
// flight, and nothing is retried).
func (m *Mem) Stats() Stats { return m.st.snapshot() }

// Collector is Bucket.Collector for a Mem.
func (m *Mem) Collector(namespace string, constLabels prometheus.Labels) prometheus.Collector {
	return NewCollector(namespace, constLabels, m.Stats, time.Now)
}
