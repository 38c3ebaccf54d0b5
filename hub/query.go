package hub

import (
	"bytes"
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
// A key filter scans the whole window range of the pipeline; results are
// not indexed by key.
func (h *Hub) Query(q Query) (rs []Result, next []byte, err error) {
	pp := h.pipes[q.Pipeline]
	if pp == nil {
		return nil, nil, fmt.Errorf("hub: query: unknown pipeline %q: %w", q.Pipeline, ErrBadQuery)
	}
	if q.After != nil {
		if _, _, _, _, err := parseResultKey(q.After); err != nil {
			return nil, nil, fmt.Errorf("hub: query: cursor: %v: %w", err, ErrBadQuery)
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	limit = min(limit, maxLimit)
	err = h.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketResults).Bucket([]byte(q.Pipeline))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		var k, v []byte
		if q.After != nil {
			if k, v = c.Seek(q.After); bytes.Equal(k, q.After) {
				k, v = c.Next()
			}
		} else {
			k, v = c.Seek(appendTime(nil, q.From))
		}
		for k != nil {
			nk, nv := c.Next()
			start, end, key, version, err := parseResultKey(k)
			if err != nil {
				return fmt.Errorf("hub: query: results/%s key %x: %v: %w", q.Pipeline, k, err, ErrCorrupt)
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
			edges, emitted, state, err := parseResultValue(payload)
			if err != nil {
				return fmt.Errorf("hub: query: results/%s key %x: %v: %w", q.Pipeline, k, err, ErrCorrupt)
			}
			rs = append(rs, Result{
				Pipeline: q.Pipeline, Key: key, Start: start, End: end, Version: version,
				State: bytes.Clone(state), Edges: edges, Emitted: emitted,
			})
			if len(rs) == limit {
				if nk != nil {
					next = bytes.Clone(k)
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
