package hub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/sync/archive"
	"github.com/runnel-io/runnel/window/aggregate"
)

// The archive log (package doc, Archive log): with Config.ArchiveMaxPending
// set, every commit appends the results it emits to the archive bucket's
// log, in its own transaction, and the archiver (sync/archive) takes them
// from there to object storage through ArchiveLog.

// ErrArchiveFull: the archive log holds ArchiveMaxPending results not yet
// archived (object storage is down or slow); batches are refused until
// the archiver catches up, so the edges keep their data.
var ErrArchiveFull = errors.New("hub: archive log full")

var (
	bucketArchive = []byte("archive")
	archiveLog    = []byte("log")     // sub-bucket: u64be seq -> record(entry)
	archiveSchema = []byte("schemas") // sub-bucket: u64be schema id -> record(schema)
	archiveState  = []byte("state")   // record(the archiver's state)
	archiveLast   = []byte("last")    // record(u64be highest seq written)
)

// archiveSchemaOf is the archive schema of a pipe's results.
func archiveSchemaOf(p *operators.Pipeline, class uint32) *archive.Schema {
	s := &archive.Schema{Pipeline: p.Name, Class: class, Keys: p.KeyFields()}
	for i := range p.Aggregates.Len() {
		sp := p.Aggregates.Spec(i)
		t := archive.Float
		if sp.Func == aggregate.Count || sp.Func == aggregate.Distinct {
			t = archive.Int
		}
		s.Aggregates = append(s.Aggregates, archive.Aggregate{Name: sp.Name, Type: t})
	}
	return s
}

// archiving is the hub's side of the archive log, under Hub.mu except
// where noted.
type archiving struct {
	next uint64 // the next sequence number prepare assigns
	// last is the highest sequence number durable in the log, cursor the
	// archiver's (entries at or below it are archived); both atomic, read
	// by ArchiveLog without mu.
	last, cursor atomic.Uint64
	row          archive.Row
}

// pending is how many results the log holds that are not archived.
func (a *archiving) pending() uint64 {
	l, c := a.last.Load(), a.cursor.Load()
	if l > c {
		return l - c
	}
	return 0
}

// logResult adds the archive log entry of the result version emit just
// made of w (its merged state in pp.merged) to ws. Caller holds h.mu.
func (h *Hub) logResult(ws *writeSet, pp *pipe, w *window, revs []uint32, emitted int64) {
	if h.cfg.ArchiveMaxPending == 0 {
		return
	}
	if pp.archSchema == nil {
		pp.archSchema = archiveSchemaOf(pp.spec0, pp.class)
		pp.archID = pp.archSchema.ID()
	}
	if !pp.archLogged {
		ws.scratch = binary.BigEndian.AppendUint64(ws.scratch[:0], pp.archID)
		k := len(ws.scratch)
		ws.scratch = pp.archSchema.AppendEncode(ws.scratch)
		ws.addRecord(opPutArchiveSchema, 0, int32(pp.idx), ws.scratch[:k], ws.scratch[k:])
	}
	r := &h.arch.row
	*r = archive.Row{Schema: pp.archID, Start: w.start, End: w.end, Version: w.version, Edges: uint32(len(w.parts)),
		Emitted: emitted, Revisions: revs, Key: w.key, Values: r.Values[:0]}
	for i := range pp.set.Len() {
		v := pp.set.Result(pp.merged, i)
		r.Values = append(r.Values, archive.Value{Kind: archive.ValueKind(v.Kind), Int: v.Int, Float: v.Float})
	}
	seq := h.arch.next
	h.arch.next++
	ws.scratch = binary.BigEndian.AppendUint64(ws.scratch[:0], seq)
	k := len(ws.scratch)
	ws.scratch = archive.AppendEntry(ws.scratch, r)
	ws.addRecord(opPutArchive, 0, 0, ws.scratch[:k], ws.scratch[k:])
	ws.archLast = seq
	r.Revisions, r.Key = nil, nil
}

// restoreArchive creates the archive bucket of a store without one and
// reads where its log stands.
func (h *Hub) restoreArchive(tx *bolt.Tx) error {
	b, err := tx.CreateBucketIfNotExists(bucketArchive)
	if err != nil {
		return err
	}
	for _, name := range [][]byte{archiveLog, archiveSchema} {
		if _, err := b.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	var last uint64
	if v := b.Get(archiveLast); v != nil {
		p, err := openRecord(archiveLast, v)
		if err != nil {
			return err
		}
		if len(p) != 8 {
			return fmt.Errorf("hub: archive/last of %d bytes: %w", len(p), ErrCorrupt)
		}
		last = binary.BigEndian.Uint64(p)
	}
	cursor := last
	if k, _ := b.Bucket(archiveLog).Cursor().First(); k != nil {
		if len(k) != 8 || binary.BigEndian.Uint64(k) == 0 || binary.BigEndian.Uint64(k) > last {
			return fmt.Errorf("hub: archive/log key %x beyond archive/last %d: %w", k, last, ErrCorrupt)
		}
		cursor = binary.BigEndian.Uint64(k) - 1
	}
	h.arch.next = last + 1
	h.arch.last.Store(last)
	h.arch.cursor.Store(cursor)
	return nil
}

// ArchiveLog returns the hub's archive log, for the archiver
// (sync/archive). It fails with ErrClosed once the hub is closed: stop the
// archiver first.
func (h *Hub) ArchiveLog() archive.Log { return &archiveLogOf{db: h.db, h: h} }

// archiveLogOf is the archive log of a hub's store: of the running hub h,
// or (h nil) of a store opened read-only by ReadArchiveStatus.
type archiveLogOf struct {
	db *bolt.DB
	h  *Hub
}

func (l *archiveLogOf) hub() *Hub { return l.h }

func closedErr(err error) error {
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

// Scan implements archive.Log: in one read transaction, checking every
// record's frame.
func (l *archiveLogOf) Scan(after, through uint64, fn func(uint64, []byte) error) error {
	return closedErr(l.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketArchive).Bucket(archiveLog).Cursor()
		for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, after+1)); k != nil; k, v = c.Next() {
			seq := binary.BigEndian.Uint64(k)
			if seq > through {
				return nil
			}
			p, err := openRecord(k, v)
			if err != nil {
				return err
			}
			if err := fn(seq, p); err != nil {
				return err
			}
		}
		return nil
	}))
}

// Last implements archive.Log.
func (l *archiveLogOf) Last() uint64 {
	if l.h != nil {
		return l.h.arch.last.Load()
	}
	var last uint64
	_ = l.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketArchive); b != nil {
			if p, err := openRecord(archiveLast, b.Get(archiveLast)); err == nil && len(p) == 8 {
				last = binary.BigEndian.Uint64(p)
			}
		}
		return nil
	})
	return last
}

// Schema implements archive.Log.
func (l *archiveLogOf) Schema(id uint64) ([]byte, error) {
	var out []byte
	err := l.db.View(func(tx *bolt.Tx) error {
		k := binary.BigEndian.AppendUint64(nil, id)
		v := tx.Bucket(bucketArchive).Bucket(archiveSchema).Get(k)
		if v == nil {
			return fmt.Errorf("hub: archive/schemas has no schema %016x: %w", id, ErrCorrupt)
		}
		p, err := openRecord(k, v)
		out = append(out, p...)
		return err
	})
	return out, closedErr(err)
}

// State implements archive.Log.
func (l *archiveLogOf) State() ([]byte, error) {
	var out []byte
	err := l.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketArchive)
		if b == nil {
			return nil
		}
		v := b.Get(archiveState)
		if v == nil {
			return nil
		}
		p, err := openRecord(archiveState, v)
		out = append([]byte{}, p...)
		return err
	})
	return out, closedErr(err)
}

// trimChunk bounds the log entries one trimming transaction deletes, so
// that it holds the store's writer lock (and the hub's commits) briefly.
const trimChunk = 4096

// Save implements archive.Log: the state in one transaction, then the
// log trimmed through trim in transactions of trimChunk entries.
func (l *archiveLogOf) Save(state []byte, trim uint64) error {
	h := l.hub()
	if h == nil {
		return errors.New("hub: the archive log of a store opened read-only")
	}
	err := h.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketArchive).Put(archiveState, appendRecord(nil, archiveState, state))
	})
	if err != nil {
		return closedErr(err)
	}
	if trim == 0 {
		return nil
	}
	for c := h.arch.cursor.Load(); trim > c && !h.arch.cursor.CompareAndSwap(c, trim); c = h.arch.cursor.Load() {
	}
	for done := false; !done; {
		err := h.db.Update(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketArchive).Bucket(archiveLog).Cursor()
			n := 0
			for k, _ := c.First(); ; k, _ = c.First() {
				if k == nil || binary.BigEndian.Uint64(k) > trim {
					done = true
					return nil
				}
				if n == trimChunk {
					return nil
				}
				if err := c.Delete(); err != nil {
					return err
				}
				n++
			}
		})
		if err != nil {
			return closedErr(err)
		}
	}
	return nil
}

// ArchivePending is how many results the archive log holds that are not
// yet archived.
func (h *Hub) ArchivePending() uint64 { return h.arch.pending() }

// ReadArchiveStatus reads the archive's status from the store in dir
// (dir/hub.db) when no hub has it open: `runnel-hub archive status` of a
// stopped hub. A store open in a running hub fails within a second (ask
// that hub instead: GET /v1/archive/status).
func ReadArchiveStatus(dir string) (archive.Status, error) {
	path := filepath.Join(dir, "hub.db")
	if _, err := os.Stat(path); err != nil {
		return archive.Status{}, fmt.Errorf("hub: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return archive.Status{}, fmt.Errorf("hub: open %s read-only: %w", path, err)
	}
	defer db.Close()
	st, err := archive.ReadStatus(&archiveLogOf{db: db})
	if err != nil {
		return st, fmt.Errorf("hub: archive status of %s: %w", path, err)
	}
	return st, nil
}
