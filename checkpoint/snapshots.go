package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Snapshots are the snapshots of one edge in a store:
//
//	<edge-id>/snapshots/<checkpoint id, 20 digits>/data       the data object (header, zstd state file)
//	<edge-id>/snapshots/<checkpoint id, 20 digits>/manifest   written last: the snapshot is complete
//
// Keys are relative to the store (an s3:// URL's prefix, a directory), so
// one store holds a fleet's snapshots. The zero-padded ids list in
// checkpoint order. An edge writes its own snapshots only, one at a time.
type Snapshots struct {
	Store Store
	Edge  string
}

// Object names within a snapshot's directory.
const (
	DataObject     = "data"
	ManifestObject = "manifest"
)

var edgeIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// CheckEdgeID says whether id can name an edge's snapshots: 1 to 64
// letters, digits, '.', '_' or '-' (the edge's own rule), and not "." or
// "..", which are not names in a path.
func CheckEdgeID(id string) error {
	if !edgeIDRE.MatchString(id) || id == "." || id == ".." {
		return fmt.Errorf("checkpoint: edge id %q: want 1 to 64 letters, digits, '.', '_' or '-' (not . or ..)", id)
	}
	return nil
}

// Prefix is the prefix of every key of the edge's snapshots.
func (s *Snapshots) Prefix() string { return s.Edge + "/snapshots/" }

// Key is the key of object name (DataObject, ManifestObject) of snapshot id.
func (s *Snapshots) Key(id uint64, name string) string {
	return fmt.Sprintf("%s%020d/%s", s.Prefix(), id, name)
}

// Put uploads a snapshot: the data object from the file at dataPath
// (with PutFile when the store has it), then its manifest m. Until the
// manifest is in, the snapshot does not exist for List. A data object left
// by a Put that failed is deleted by a later Prune.
func (s *Snapshots) Put(ctx context.Context, m *Manifest, dataPath string) error {
	if err := CheckEdgeID(s.Edge); err != nil {
		return err
	}
	if m.EdgeID != s.Edge {
		return fmt.Errorf("checkpoint: put a snapshot of edge %s among edge %s's", m.EdgeID, s.Edge)
	}
	dk := s.Key(m.Checkpoint, DataObject)
	var err error
	if fp, ok := s.Store.(FilePutter); ok {
		err = fp.PutFile(ctx, dk, dataPath)
	} else {
		err = putFile(ctx, s.Store, dk, dataPath)
	}
	if err != nil {
		return fmt.Errorf("checkpoint: upload snapshot %d: data object %s: %w", m.Checkpoint, dk, err)
	}
	b := AppendManifest(nil, m)
	mk := s.Key(m.Checkpoint, ManifestObject)
	if err := s.Store.Put(ctx, mk, strings.NewReader(string(b)), int64(len(b))); err != nil {
		return fmt.Errorf("checkpoint: upload snapshot %d: manifest %s: %w", m.Checkpoint, mk, err)
	}
	return nil
}

func putFile(ctx context.Context, st Store, key, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return st.Put(ctx, key, f, fi.Size())
}

// Listing is what List found: the complete snapshots, oldest first, and
// what is there but is not a snapshot one can restore.
type Listing struct {
	Complete []Manifest
	// Incomplete are the ids with a data object and no manifest (an
	// upload in progress, or one that failed).
	Incomplete []uint64
	// Bad says, per id, why a manifest is unusable (it does not decode,
	// or names another edge or checkpoint). Such snapshots are not in
	// Complete.
	Bad map[uint64]error
}

// List reads every manifest of the edge's snapshots.
func (s *Snapshots) List(ctx context.Context) (Listing, error) {
	var l Listing
	if err := CheckEdgeID(s.Edge); err != nil {
		return l, err
	}
	keys, err := s.Store.List(ctx, s.Prefix())
	if err != nil {
		return l, fmt.Errorf("checkpoint: list the snapshots of edge %s: %w", s.Edge, err)
	}
	ids, manifests := s.parseKeys(keys)
	for _, id := range ids {
		if !manifests[id] {
			l.Incomplete = append(l.Incomplete, id)
			continue
		}
		m, err := s.readManifest(ctx, id)
		if err != nil {
			if errors.Is(err, ErrNotFound) { // deleted since the listing
				continue
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrFormat) {
				return l, err
			}
			if l.Bad == nil {
				l.Bad = map[uint64]error{}
			}
			l.Bad[id] = err
			continue
		}
		l.Complete = append(l.Complete, m)
	}
	return l, nil
}

// parseKeys returns the snapshot ids that keys name (ascending) and which
// of them have a manifest. Other keys under the prefix are ignored.
func (s *Snapshots) parseKeys(keys []string) ([]uint64, map[uint64]bool) {
	var ids []uint64
	manifests := map[uint64]bool{}
	seen := map[uint64]bool{}
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, s.Prefix())
		if !ok {
			continue
		}
		dir, name, ok := strings.Cut(rest, "/")
		if !ok || len(dir) != 20 || (name != DataObject && name != ManifestObject) {
			continue
		}
		id, err := strconv.ParseUint(dir, 10, 64)
		if err != nil || id == 0 {
			continue
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
		if name == ManifestObject {
			manifests[id] = true
		}
	}
	slices.Sort(ids)
	return ids, manifests
}

// readManifest reads and decodes the manifest of snapshot id, and checks
// that it is of this edge and id.
func (s *Snapshots) readManifest(ctx context.Context, id uint64) (Manifest, error) {
	k := s.Key(id, ManifestObject)
	rc, err := s.Store.Get(ctx, k)
	if err != nil {
		return Manifest{}, fmt.Errorf("checkpoint: manifest %s: %w", k, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, int64(manifestHead+maxManifestBody+4+1)))
	if err != nil {
		return Manifest{}, fmt.Errorf("checkpoint: manifest %s: %w", k, err)
	}
	m, err := DecodeManifest(b)
	switch {
	case err != nil:
		return Manifest{}, fmt.Errorf("manifest %s: %w", k, err)
	case m.EdgeID != s.Edge || m.Checkpoint != id:
		return Manifest{}, corruptf("checkpoint: manifest %s is of edge %s, checkpoint %d", k, m.EdgeID, m.Checkpoint)
	}
	return m, nil
}

// Pick returns the manifest of snapshot id, or of the latest complete
// snapshot when id is 0. A snapshot that is missing, incomplete or whose
// manifest is bad is ErrNotFound, with what there is instead.
func (l *Listing) Pick(edge string, id uint64) (Manifest, error) {
	if id == 0 {
		if len(l.Complete) == 0 {
			return Manifest{}, errorf(ErrNotFound, "checkpoint: no complete snapshot of edge %s%s", edge, l.others())
		}
		return l.Complete[len(l.Complete)-1], nil
	}
	for _, m := range l.Complete {
		if m.Checkpoint == id {
			return m, nil
		}
	}
	why := "there is none"
	switch {
	case l.Bad[id] != nil:
		why = "its manifest is unusable: " + l.Bad[id].Error()
	case slices.Contains(l.Incomplete, id):
		why = "it has a data object but no manifest: an upload in progress, or one that failed"
	}
	return Manifest{}, errorf(ErrNotFound, "checkpoint: snapshot %d of edge %s: %s%s", id, edge, why, l.others())
}

func (l *Listing) others() string {
	var ids []string
	for _, m := range l.Complete {
		ids = append(ids, strconv.FormatUint(m.Checkpoint, 10))
	}
	if len(ids) == 0 {
		return ""
	}
	if len(ids) > 10 {
		ids = append(ids[:5], append([]string{"..."}, ids[len(ids)-5:]...)...)
	}
	return " (complete snapshots: " + strings.Join(ids, ", ") + ")"
}

// Restore reads snapshot m's data object, verifies it (ReadData) and
// writes the state file to the new file dst, fsynced. On any error dst is
// removed: a refused snapshot leaves nothing behind.
func (s *Snapshots) Restore(ctx context.Context, m *Manifest, dst string) (err error) {
	k := s.Key(m.Checkpoint, DataObject)
	rc, err := s.Store.Get(ctx, k)
	if err != nil {
		return fmt.Errorf("checkpoint: snapshot %d of edge %s: data object %s: %w", m.Checkpoint, s.Edge, k, err)
	}
	defer rc.Close()
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("checkpoint: restore: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(dst)
		}
	}()
	if err := ReadData(ctxReader{ctx, rc}, m, f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("checkpoint: restore: %w", err)
	}
	return f.Close()
}

// Prune deletes the complete snapshots older than the newest keep (each
// manifest first, so a listing never finds a manifest without its data),
// and the data objects of incomplete snapshots older than the newest
// complete one (uploads that failed). It returns the ids it deleted.
// keep < 1 is taken as 1.
func (s *Snapshots) Prune(ctx context.Context, keep int) ([]uint64, error) {
	keep = max(keep, 1)
	if err := CheckEdgeID(s.Edge); err != nil {
		return nil, err
	}
	keys, err := s.Store.List(ctx, s.Prefix())
	if err != nil {
		return nil, fmt.Errorf("checkpoint: prune the snapshots of edge %s: %w", s.Edge, err)
	}
	ids, manifests := s.parseKeys(keys)
	var complete []uint64
	for _, id := range ids {
		if manifests[id] {
			complete = append(complete, id)
		}
	}
	if len(complete) == 0 {
		return nil, nil
	}
	newest := complete[len(complete)-1]
	kept := complete[max(0, len(complete)-keep):]
	var deleted []uint64
	for _, id := range ids {
		if id >= newest || slices.Contains(kept, id) {
			continue
		}
		for _, name := range []string{ManifestObject, DataObject} {
			if err := s.Store.Delete(ctx, s.Key(id, name)); err != nil && !errors.Is(err, ErrNotFound) {
				return deleted, fmt.Errorf("checkpoint: prune snapshot %d of edge %s: %w", id, s.Edge, err)
			}
		}
		deleted = append(deleted, id)
	}
	return deleted, nil
}

// ParseRef splits a snapshot reference, URL/<edge-id>[@<checkpoint-id>]
// (s3://bucket/prefix/gw-001@42, file:///backups/runnel/gw-001,
// /backups/runnel/gw-001), into the store's URL, the edge id and the
// checkpoint id (0: the latest).
func ParseRef(ref string) (store, edge string, id uint64, err error) {
	bad := func(format string, args ...any) (string, string, uint64, error) {
		return "", "", 0, errorf(ErrStoreURL, "checkpoint: snapshot reference %q: "+format, append([]any{ref}, args...)...)
	}
	s := strings.TrimRight(ref, "/")
	if at := strings.LastIndexByte(s, '@'); at > strings.LastIndexByte(s, '/') {
		n, perr := strconv.ParseUint(s[at+1:], 10, 64)
		if perr != nil || n == 0 {
			return bad("%q after @ is not a checkpoint id (a number from 1)", s[at+1:])
		}
		s, id = s[:at], n
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			return bad("it names no edge: write URL/<edge-id>, e.g. s3://bucket/prefix/gw-001")
		}
		store, edge = scheme+"://"+rest[:i], rest[i+1:]
		if i == 0 {
			store += "/" // file:///gw-001: the root directory
		}
	} else {
		i := strings.LastIndexByte(s, '/')
		switch {
		case i < 0:
			store, edge = ".", s
		case i == 0:
			store, edge = "/", s[1:]
		default:
			store, edge = s[:i], s[i+1:]
		}
	}
	if err := CheckEdgeID(edge); err != nil {
		return bad("the last path element is the edge id: %v", err)
	}
	return store, edge, id, nil
}
