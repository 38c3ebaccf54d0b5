package hub

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

const (
	defaultLimit = 1000
	maxLimit     = 10000
)

// Query returns stored results of one pipeline in window order (start, end),
// then key, then version: the latest version of each window, or every
// version oldest first with AllVersions. Limit defaults to 1000 and is
// capped at 10000. When a page is full, next is a cursor for q.After that
// continues after it (the following page may be empty); next is nil when
// the scan reached the end.
//
// The results are those of one class (Query.Revision; 0: the latest
// revision's, or the local pipeline's). A cursor holds its class: with
// Revision 0 the next page reads that class even when a later revision
// of another class became known since; with another Revision, the
// revision must be of the cursor's class.
//
// A key filter scans the whole window range of the pipeline; results are
// not indexed by key.
func (h *Hub) Query(q Query) (rs []Result, next []byte, err error) {
	cat := h.cat.Load()
	pp := cat.resolve(q.Pipeline, q.Revision)
	if pp == nil {
		if q.Revision != 0 && cat.names[q.Pipeline] != nil {
			return nil, nil, fmt.Errorf("hub: query: pipeline %q has no revision %d the hub knows: %w", q.Pipeline, q.Revision, ErrBadQuery)
		}
		return nil, nil, fmt.Errorf("hub: query: unknown pipeline %q: %w", q.Pipeline, ErrBadQuery)
	}
	var after []byte
	if q.After != nil {
		class, k, err := parseCursor(q.After)
		if err != nil {
			return nil, nil, fmt.Errorf("hub: query: cursor: %v: %w", err, ErrBadQuery)
		}
		switch c := cat.class(q.Pipeline, class); {
		case c == nil:
			return nil, nil, fmt.Errorf("hub: query: cursor: of class %d, which pipeline %q does not have: %w", class, q.Pipeline, ErrBadQuery)
		case q.Revision != 0 && c != pp:
			return nil, nil, fmt.Errorf("hub: query: cursor: of class %d, and revision %d is in class %d: %w", class, q.Revision, pp.class, ErrBadQuery)
		default:
			pp, after = c, k
		}
	}
	return h.queryPipe(pp, q, after)
}

// queryPipe is Query of pipe pp, continuing after results-bucket key
// after (nil: from q.From).
func (h *Hub) queryPipe(pp *pipe, q Query, after []byte) (rs []Result, next []byte, err error) {
	managed := pp.class != 0
	limit := q.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	limit = min(limit, maxLimit)
	err = h.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketResults).Bucket([]byte(pp.store))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		var k, v []byte
		if after != nil {
			if k, v = c.Seek(after); bytes.Equal(k, after) {
				k, v = c.Next()
			}
		} else {
			k, v = c.Seek(appendTime(nil, q.From))
		}
		for k != nil {
			nk, nv := c.Next()
			start, end, key, version, err := parseResultKey(k)
			if err != nil {
				return fmt.Errorf("hub: query: results/%s key %x: %v: %w", pp.store, k, err, ErrCorrupt)
			}
			switch {
			case q.To != 0 && start >= q.To:
				return nil // every later window ends after To
			case start < q.From,
				q.To != 0 && end > q.To,
				q.Key != nil && !bytes.Equal(key, q.Key),
				// Not the latest: the next key is the same window.
				!q.AllVersions && nk != nil && len(nk) == len(k) && bytes.Equal(nk[:len(nk)-4], k[:len(k)-4]):
				k, v = nk, nv
				continue
			}
			payload, err := openRecord(k, v)
			if err != nil {
				return err
			}
			edges, emitted, revs, state, err := parseResultValue(payload, managed, nil)
			if err != nil {
				return fmt.Errorf("hub: query: results/%s key %x: %v: %w", pp.store, k, err, ErrCorrupt)
			}
			rs = append(rs, Result{
				Pipeline: q.Pipeline, Key: key, Start: start, End: end, Version: version,
				State: bytes.Clone(state), Edges: edges, Emitted: emitted, Class: pp.class, Revisions: revs,
			})
			if len(rs) == limit {
				if nk != nil {
					next = appendCursor(nil, pp.class, k)
				}
				return nil
			}
			k, v = nk, nv
		}
		return nil
	})
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		err = ErrClosed
	}
	if err != nil {
		return nil, nil, err
	}
	return rs, next, nil
}

// A cursor is u32 class | the results-bucket key of the last result of
// the page: the class keeps a paging client on one class.
func appendCursor(dst []byte, class uint32, k []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, class)
	return append(dst, k...)
}

func parseCursor(c []byte) (class uint32, k []byte, err error) {
	if len(c) < 4 {
		return 0, nil, errors.New("short cursor")
	}
	if _, _, _, _, err := parseResultKey(c[4:]); err != nil {
		return 0, nil, err
	}
	return binary.BigEndian.Uint32(c), c[4:], nil
}

// CursorClass returns the class whose results a Query cursor continues
// (0: a local pipeline's), so that a caller can pick that class's spec
// before the next Query; ok is false for bytes that cannot be a cursor.
// Query checks the rest of the cursor.
func CursorClass(after []byte) (class uint32, ok bool) {
	if len(after) < 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(after), true
}
