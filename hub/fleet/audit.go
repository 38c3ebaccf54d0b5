package fleet

import (
	"maps"
	"slices"

	bolt "go.etcd.io/bbolt"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Audit paging bounds.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
)

// Audit returns the audit entries after afterID, oldest first, at most
// limit of them (0: DefaultAuditLimit; capped at MaxAuditLimit). Every
// change is an entry: pipeline apply and delete, labels, deployment
// apply, rollout actions, automatic failures and rollbacks (who is
// SystemAuthor), token create and revoke. An entry that cannot be read
// ends the page early and is logged.
func (f *Fleet) Audit(afterID uint64, limit int) []*runnelv1.AuditEntry {
	if limit <= 0 {
		limit = DefaultAuditLimit
	}
	limit = min(limit, MaxAuditLimit)
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.usable() != nil {
		return nil
	}
	var out []*runnelv1.AuditEntry
	err := f.db.View(func(tx *bolt.Tx) error {
		cur := tx.Bucket(bucketAudit).Cursor()
		for k, v := cur.Seek(auditKey(afterID + 1)); k != nil && len(out) < limit; k, v = cur.Next() {
			var a auditRecord
			if err := readJSON(where{bucketAudit, k}, v, &a); err != nil {
				return err
			}
			out = append(out, &runnelv1.AuditEntry{
				Id: a.ID, AtMs: a.AtMs, Who: a.Who, Action: a.Action, Object: a.Object, Before: a.Before, After: a.After,
			})
		}
		return nil
	})
	if err != nil {
		f.log.Error("fleet: read the audit log", "err", err)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
