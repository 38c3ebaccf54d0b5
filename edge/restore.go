package edge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/runnel-io/runnel/checkpoint"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/state"
	"github.com/runnel-io/runnel/sync/uplink"
)

// Restore. `runnel-edge restore` rebuilds a gateway's data directory from
// a snapshot: it fetches and verifies the snapshot into a new directory
// beside the data directory, opens the state file there (which verifies
// every page and record), gives it a new epoch, creates an empty ingest
// log that starts where the checkpoint's position is, fsyncs, and only
// then renames the new directory into place. A snapshot that is corrupt,
// truncated, or not what its manifest says is refused before anything
// touches the data directory.
//
// What the next start does and does not count is in docs/object-storage.md
// ("Snapshots and restore"); in short: the edge resumes at the snapshot's
// checkpoint under a new epoch, the hub fences the old one, the edge
// resends its whole outbox (what the hub had not acked among it, and what
// it had, which replaces rather than adds), and readings the dead edge
// took after that checkpoint are gone from the edge.

// The restore record, in the restored state file: the manifest of the
// snapshot it came from and when it was restored.
const (
	bucketRestore = "restore"
	keyRestoreOf  = "manifest"
	keyRestoreAt  = "at" // varint Unix ms
)

// ErrDataDirInUse: the data directory is not empty (without Force), or an
// edge runs on it.
var ErrDataDirInUse = errors.New("edge: the data directory is in use")

// RestoreConfig says which snapshot Restore restores where.
type RestoreConfig struct {
	Store  checkpoint.Store
	EdgeID string
	// Checkpoint is the snapshot's checkpoint id; 0: the latest complete
	// snapshot.
	Checkpoint uint64
	DataDir    string
	// Force replaces a data directory that is not empty (never one an
	// edge runs on). Its old contents are deleted once the new ones are
	// in place.
	Force  bool
	Logger *slog.Logger
}

// Restored says what Restore did.
type Restored struct {
	Manifest checkpoint.Manifest // the snapshot restored
	// Epoch is the uplink epoch the next start uses; Checkpoint the
	// checkpoint id it continues from (past every snapshot id in the
	// store, so that its snapshots never collide with the dead edge's).
	Epoch      uint64
	Checkpoint uint64
}

// Restore restores a snapshot into cfg.DataDir; see the comment above.
func Restore(ctx context.Context, cfg RestoreConfig) (Restored, error) {
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	var res Restored
	if cfg.DataDir == "" {
		return res, errors.New("edge: restore: no data directory")
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return res, fmt.Errorf("edge: restore: %w", err)
	}
	if err := checkDataDir(dir, cfg.Force); err != nil {
		return res, err
	}
	ss := checkpoint.Snapshots{Store: cfg.Store, Edge: cfg.EdgeID}
	l, err := ss.List(ctx)
	if err != nil {
		return res, fmt.Errorf("edge: restore: %w", err)
	}
	m, err := l.Pick(cfg.EdgeID, cfg.Checkpoint)
	if err != nil {
		return res, fmt.Errorf("edge: restore: %w", err)
	}
	res.Manifest = m
	// Every epoch and checkpoint id the edge used that the store knows
	// of: the restored edge goes past them.
	maxEpoch, maxID := m.Epoch, m.Checkpoint
	for _, o := range l.Complete {
		maxEpoch, maxID = max(maxEpoch, o.Epoch), max(maxID, o.Checkpoint)
	}
	for _, id := range l.Incomplete {
		maxID = max(maxID, id)
	}
	for id := range l.Bad {
		maxID = max(maxID, id)
	}
	if maxEpoch+1 >= uplink.MaxEpoch {
		return res, fmt.Errorf("edge: restore: the store's snapshots reach epoch %d: no epoch is left below %d", maxEpoch, uint64(uplink.MaxEpoch))
	}

	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return res, fmt.Errorf("edge: restore: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".restore-")
	if err != nil {
		return res, fmt.Errorf("edge: restore: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			os.RemoveAll(tmp)
		}
	}()
	lg.Info("edge: restore: fetching", "edge", cfg.EdgeID, "checkpoint", m.Checkpoint, "epoch", m.Epoch,
		"created", m.Created, "data_bytes", m.DataSize, "into", tmp)
	dbPath := filepath.Join(tmp, "state.db")
	if err := ss.Restore(ctx, &m, dbPath); err != nil {
		return res, fmt.Errorf("edge: restore refused: %w", err)
	}
	meta, err := restoreState(dbPath, &m, maxEpoch+1, maxID)
	if err != nil {
		return res, fmt.Errorf("edge: restore refused: %w", err)
	}
	res.Epoch, res.Checkpoint = maxEpoch+1, meta.ID
	// The ingest log starts where the checkpoint stopped: the records
	// before that position are in the state, those after it are lost.
	lopts := ingestlog.Options{First: ingestlog.Position(meta.LogPos)}
	log, _, err := ingestlog.Open(ctx, filepath.Join(tmp, "log"), &lopts)
	if err == nil {
		err = log.Close(ctx)
	}
	if err != nil {
		return res, fmt.Errorf("edge: restore: create the ingest log: %w", err)
	}
	if err := syncDir(tmp); err != nil {
		return res, fmt.Errorf("edge: restore: %w", err)
	}
	// An edge may have started on the directory meanwhile.
	if err := checkDataDir(dir, cfg.Force); err != nil {
		return res, err
	}
	old, err := swapDir(tmp, dir)
	if err != nil {
		return res, fmt.Errorf("edge: restore: %w", err)
	}
	keep = true
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			lg.Warn("edge: restore: remove the replaced data directory", "dir", old, "err", err)
		}
	}
	lg.Info("edge: restored", "edge", cfg.EdgeID, "data_dir", dir, "checkpoint", m.Checkpoint, "continues_at", meta.ID,
		"epoch", res.Epoch, "log_position", meta.LogPos, "next_seq", meta.NextSeq)
	return res, nil
}

// checkDataDir refuses a data directory an edge runs on, and, without
// force, one that is not empty.
func checkDataDir(dir string, force bool) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("edge: restore: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("edge: restore: %s is not a directory: %w", dir, ErrDataDirInUse)
	}
	if busy, err := state.InUse(filepath.Join(dir, "state.db")); err != nil {
		return fmt.Errorf("edge: restore: %w", err)
	} else if busy {
		return fmt.Errorf("edge: restore: an edge is running on %s: stop it first: %w", dir, ErrDataDirInUse)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("edge: restore: %w", err)
	}
	if len(ents) > 0 && !force {
		var names []string
		for i, e := range ents {
			if i == 5 {
				names = append(names, "...")
				break
			}
			names = append(names, e.Name())
		}
		return fmt.Errorf("edge: restore: %s is not empty (%s): restore into an empty or missing directory, or pass --force to replace it: %w",
			dir, strings.Join(names, ", "), ErrDataDirInUse)
	}
	return nil
}

// restoreState checks the restored state file against its manifest and
// prepares it for the next start: the new epoch, the checkpoint id moved
// up to maxID (past every snapshot of the store), and the restore record.
func restoreState(path string, m *checkpoint.Manifest, epoch, maxID uint64) (checkpoint.Meta, error) {
	st, err := state.Open(path, state.Options{})
	if err != nil {
		return checkpoint.Meta{}, err
	}
	defer st.Close()
	var meta checkpoint.Meta
	err = st.Update(func(tx *state.Tx) error {
		var ok bool
		var err error
		if meta, ok, err = checkpoint.LoadMeta(tx); err != nil {
			return err
		}
		stored, _, err := loadUplinkState(tx)
		if err != nil {
			return err
		}
		if !ok || meta.ID != m.Checkpoint || meta.LogPos != m.LogPos || meta.NextSeq != m.NextSeq || stored != m.Epoch {
			return fmt.Errorf("%w: the state file holds checkpoint %d (position %d, next sequence %d, epoch %d), its manifest says checkpoint %d (%d, %d, %d)",
				checkpoint.ErrCorrupt, meta.ID, meta.LogPos, meta.NextSeq, stored, m.Checkpoint, m.LogPos, m.NextSeq, m.Epoch)
		}
		if maxID > meta.ID {
			meta.ID = maxID
			if err := checkpoint.StoreMeta(tx, meta); err != nil {
				return err
			}
		}
		up, err := tx.Bucket(bucketUplink)
		if err != nil {
			return err
		}
		if err := up.Put([]byte(keyEpoch), binary.AppendUvarint(nil, epoch)); err != nil {
			return err
		}
		rb, err := tx.Bucket(bucketRestore)
		if err != nil {
			return err
		}
		if err := rb.Put([]byte(keyRestoreOf), checkpoint.AppendManifest(nil, m)); err != nil {
			return err
		}
		return rb.Put([]byte(keyRestoreAt), binary.AppendVarint(nil, time.Now().UnixMilli()))
	})
	return meta, err
}

// swapDir renames tmp to dir. A dir that exists is moved aside first (and
// its path returned, for the caller to delete) unless it is empty.
func swapDir(tmp, dir string) (old string, err error) {
	parent := filepath.Dir(dir)
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", err
	case len(ents) == 0:
		if err := os.Remove(dir); err != nil {
			return "", fmt.Errorf("replace the empty %s: %w (if it is a mount point, use a directory inside it as the data directory)", dir, err)
		}
	default:
		old = fmt.Sprintf("%s.replaced-%d", dir, time.Now().UnixMilli())
		if err := os.Rename(dir, old); err != nil {
			return "", fmt.Errorf("move %s aside: %w (if it is a mount point, use a directory inside it as the data directory)", dir, err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if old != "" {
			if rerr := os.Rename(old, dir); rerr != nil {
				return "", fmt.Errorf("rename %s to %s: %w; and putting the old directory back failed too (it is %s): %v", tmp, dir, err, old, rerr)
			}
		}
		return "", fmt.Errorf("rename %s to %s: %w", tmp, dir, err)
	}
	return old, syncDir(parent)
}

// syncDir fsyncs a directory, so that the names in it are durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// checkRestored refuses a state file restored from another edge's
// snapshot: run as this edge, it would hand the hub the other edge's
// results a second time, under this edge's id.
func checkRestored(tx *state.Tx, edgeID string, lg *slog.Logger) error {
	b, err := tx.Bucket(bucketRestore)
	if err != nil {
		return err
	}
	v, err := b.Get([]byte(keyRestoreOf))
	if err != nil || v == nil {
		return err
	}
	m, err := checkpoint.DecodeManifest(v)
	if err != nil {
		return fmt.Errorf("restore record: %w", err)
	}
	if m.EdgeID != edgeID {
		return fmt.Errorf("this data directory was restored from a snapshot of edge %q (checkpoint %d), and this node runs as edge %q: "+
			"the hub would count %s's results again as %s's; run it with --edge-id %s",
			m.EdgeID, m.Checkpoint, edgeID, m.EdgeID, edgeID, m.EdgeID)
	}
	lg.Debug("edge: restored from a snapshot", "checkpoint", m.Checkpoint, "epoch", m.Epoch, "created", m.Created)
	return nil
}

// ListSnapshots lists the snapshots of edge in store.
func ListSnapshots(ctx context.Context, store checkpoint.Store, edge string) (checkpoint.Listing, error) {
	ss := checkpoint.Snapshots{Store: store, Edge: edge}
	return ss.List(ctx)
}
