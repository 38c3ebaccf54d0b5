// Package uplinktest provides an in-memory uplink.Outbox for tests and
// benchmarks of the uplink and of whatever it talks to.
package uplinktest

import (
	"maps"
	"sync"

	"github.com/runnel-io/runnel/sync/uplink"
)

// Outbox is a committed outbox in memory. Entry i of Add gets sequence
// number len+1; an ack deletes what it covers at once (a real edge does at
// its next checkpoint). Safe for concurrent use.
type Outbox struct {
	mu      sync.Mutex
	entries []uplink.Entry // seq = index + 1
	deleted uint64         // entries up to here are gone
	grew    chan struct{}
	epoch   uint64
	acked   uint64
	done    chan struct{} // closed when everything added so far is acked
	quar    map[uint64]string
}

// New returns an empty outbox at epoch 1.
func New() *Outbox {
	return &Outbox{grew: make(chan struct{}), done: make(chan struct{}), epoch: 1}
}

// Add commits entries; their Seq fields are set.
func (o *Outbox) Add(es ...uplink.Entry) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range es {
		e.Seq = uint64(len(o.entries)) + 1
		o.entries = append(o.entries, e)
	}
	close(o.grew)
	o.grew = make(chan struct{})
	if o.acked < uint64(len(o.entries)) && isClosed(o.done) {
		o.done = make(chan struct{})
	}
}

// DeleteThrough drops the entries up to seq, as if acked under an earlier
// epoch.
func (o *Outbox) DeleteThrough(seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deleted = max(o.deleted, seq)
}

// Acked returns the highest sequence acked.
func (o *Outbox) Acked() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acked
}

// Done returns a channel closed once every entry added so far is acked.
func (o *Outbox) Done() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done
}

func (o *Outbox) Committed() (uint64, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return uint64(len(o.entries)) + 1, o.grew
}

func (o *Outbox) Read(from uint64, fn func(*uplink.Entry) bool) error {
	o.mu.Lock()
	es := o.entries
	from = max(from, o.deleted+1)
	o.mu.Unlock()
	for i := from; i >= 1 && i <= uint64(len(es)); i++ {
		e := es[i-1]
		if !fn(&e) {
			break
		}
	}
	return nil
}

func (o *Outbox) Epoch() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.epoch
}

func (o *Outbox) SetEpoch(e uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.epoch = e
	return nil
}

func (o *Outbox) Ack(seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if seq <= o.acked {
		return
	}
	o.acked = seq
	o.deleted = max(o.deleted, seq)
	if seq >= uint64(len(o.entries)) && !isClosed(o.done) {
		close(o.done)
	}
}

// Quarantine marks the entries Local and keeps their reasons; like the
// edge's outbox, it skips markers, and entries gone or quarantined before.
func (o *Outbox) Quarantine(rs []uplink.Refused) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.quar == nil {
		o.quar = map[uint64]string{}
	}
	for _, r := range rs {
		if r.Seq <= o.deleted || r.Seq > uint64(len(o.entries)) || o.quar[r.Seq] != "" || o.entries[r.Seq-1].Marker {
			continue
		}
		o.quar[r.Seq] = r.Reason
		o.entries[r.Seq-1].Local = true
	}
	return nil
}

// Quarantined returns the quarantined entries' reasons by sequence.
func (o *Outbox) Quarantined() map[uint64]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.quar)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

var _ uplink.Outbox = (*Outbox)(nil)
