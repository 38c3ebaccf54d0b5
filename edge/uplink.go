package edge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/runnel-io/runnel/state"
	"github.com/runnel-io/runnel/sync/uplink"
)

// The node's side of the uplink: the outbox as uplink.Outbox. Reads are
// bbolt read transactions beside the writer's; everything that writes
// (deleting acked entries, storing a new epoch) goes through the writer
// goroutine, the store's only writer, so a checkpoint's transaction never
// mixes with anything else.

const (
	bucketUplink = "uplink"
	keyEpoch     = "epoch"
)

// writeReq asks the writer goroutine to run a write of its own (a new
// epoch, a quarantine) between checkpoints.
type writeReq struct {
	run  func() error
	done chan error
}

// errWriterStopped: the writer has stopped, so nothing more is stored.
var errWriterStopped = errors.New("edge: the checkpoint writer has stopped")

// write runs fn on the writer goroutine and returns its error.
func (n *node) write(fn func() error) error {
	req := writeReq{fn, make(chan error, 1)}
	select {
	case n.writeReqs <- req:
	case <-n.writerDone:
		return errWriterStopped
	}
	return <-req.done
}

type outboxView struct{ n *node }

func (o outboxView) Committed() (uint64, <-chan struct{}) {
	o.n.grewMu.Lock()
	defer o.n.grewMu.Unlock()
	return o.n.lastSeq.Load(), o.n.grew
}

func (o outboxView) Read(from uint64, fn func(*uplink.Entry) bool) error {
	err := o.n.store.View(func(tx *state.Tx) error {
		b, err := tx.Bucket(bucketOutbox)
		if err != nil {
			return err
		}
		var e uplink.Entry
		return b.ForEach(binary.BigEndian.AppendUint64(nil, from), func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("edge: outbox key %x", k)
			}
			oe, err := DecodeOutbox(binary.BigEndian.Uint64(k), v)
			if err != nil {
				return err
			}
			local := oe.NotForHub
			if oe.Revision == 0 {
				local = !o.n.pipeToHub(oe.Pipeline)
			}
			e = uplink.Entry{Seq: oe.Seq, Pipeline: oe.Pipeline, Revision: oe.Revision, Local: oe.Quarantined || local, Marker: oe.Marker, Watermark: oe.Watermark,
				Key: oe.Result.Key, Start: oe.Result.Start, End: oe.Result.End, Version: oe.Result.Version, State: oe.Result.State}
			if !fn(&e) {
				return errStopScan
			}
			return nil
		})
	})
	if errors.Is(err, errStopScan) {
		return nil
	}
	return err
}

func (o outboxView) Epoch() uint64 { return o.n.epoch.Load() }

func (o outboxView) SetEpoch(epoch uint64) error {
	return o.n.write(func() error { return o.n.storeEpoch(epoch) })
}

func (o outboxView) Quarantine(rs []uplink.Refused) error {
	return o.n.write(func() error { return o.n.quarantine(rs) })
}

// Ack records the hub's ack; the next checkpoint deletes the entries.
func (o outboxView) Ack(seq uint64) {
	for {
		old := o.n.uplinkAck.Load()
		if seq <= old {
			return
		}
		if o.n.uplinkAck.CompareAndSwap(old, seq) {
			o.n.uplinkAckAt.Store(time.Now().UnixMilli())
			return
		}
	}
}

// loadUplinkState reads the stored uplink epoch (1 when none was stored)
// and the MQTT outputs' cursor.
func loadUplinkState(tx *state.Tx) (epoch, published uint64, err error) {
	b, err := tx.Bucket(bucketUplink)
	if err != nil {
		return 0, 0, err
	}
	read := func(key string, def uint64) (uint64, error) {
		v, err := b.Get([]byte(key))
		if err != nil || v == nil {
			return def, err
		}
		x, n := binary.Uvarint(v)
		if n <= 0 || n != len(v) {
			return 0, fmt.Errorf("edge: uplink %s %x: corrupt", key, v)
		}
		return x, nil
	}
	if epoch, err = read(keyEpoch, 1); err != nil {
		return 0, 0, err
	}
	if epoch == 0 {
		return 0, 0, fmt.Errorf("edge: uplink epoch 0: corrupt")
	}
	published, err = read(keyPublished, 0)
	return epoch, published, err
}

// storeEpoch commits a new epoch on the writer goroutine.
func (n *node) storeEpoch(epoch uint64) error {
	err := n.store.Update(func(tx *state.Tx) error {
		b, err := tx.Bucket(bucketUplink)
		if err != nil {
			return err
		}
		return b.Put([]byte(keyEpoch), binary.AppendUvarint(nil, epoch))
	})
	if err == nil {
		n.epoch.Store(epoch)
	}
	return err
}

// deleteAcked deletes the outbox entries every reader is past (the
// uplink's ack, the MQTT outputs' cursor), within a checkpoint's
// transaction, and stores the MQTT outputs' cursor there too. It returns
// the bytes freed.
func (n *node) deleteAcked(tx *state.Tx, outbox *state.Bucket) (int64, error) {
	if n.publishes {
		b, err := tx.Bucket(bucketUplink)
		if err != nil {
			return 0, err
		}
		if err := b.Put([]byte(keyPublished), binary.AppendUvarint(nil, n.published.Load())); err != nil {
			return 0, err
		}
	}
	upTo := n.deletableUpTo()
	if upTo == 0 || upTo < n.deletedTo {
		return 0, nil
	}
	var keys [][]byte
	var freed int64
	err := outbox.ForEach(binary.BigEndian.AppendUint64(nil, n.deletedTo), func(k, v []byte) error {
		if binary.BigEndian.Uint64(k) > upTo {
			return errStopScan
		}
		keys = append(keys, append([]byte(nil), k...))
		freed += int64(len(v))
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return 0, err
	}
	for _, k := range keys {
		if err := outbox.Delete(k); err != nil {
			return 0, err
		}
	}
	n.pendingDeletedTo = upTo + 1
	return freed, nil
}

var errStopScan = errors.New("stop scan")

// runUplink runs the uplink until ctx is done.
func (n *node) runUplink(ctx context.Context) error {
	cfg := *n.cfg.Uplink
	cfg.EdgeID = n.cfg.EdgeID
	if cfg.Logger == nil {
		cfg.Logger = n.lg
	}
	u, err := uplink.New(cfg, outboxView{n})
	if err != nil {
		return err
	}
	n.status.uplink.Store(u)
	if n.cfg.Fleet == nil {
		return u.Run(ctx)
	}
	// The control stream shares the uplink's connection; it stops first,
	// as Run closes the connection when it returns.
	actx, stop := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		n.runAgent(actx, u)
	}()
	err = u.Run(ctx)
	stop()
	<-agentDone
	return err
}
