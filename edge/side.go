package edge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
	"github.com/runnel-io/runnel/state"
	"github.com/runnel-io/runnel/sync/uplink"
)

// Side outputs: what the node sets aside, with the reason, instead of
// letting it block or vanish. Dead letters (payloads that cannot become
// records) and late records are committed with the checkpoint that covers
// them; quarantined outbox entries (results the hub will never accept) when
// the uplink sets them aside. Each is one JSON line in its bucket of the
// state file, keyed by when it was committed (docs/formats/outbox.md, "Side
// outputs"), so that the oldest go first when the node must make room:
//
//   - Together they may take SideOutputs.MaxBytes (keys and values); each
//     commit that would pass it deletes the oldest entries of the side
//     that holds the most until it does not, so that a flood of one kind
//     (garbage payloads) pushes out its own, not the others. They count
//     toward the disk cap.
//   - Entries older than SideOutputs.MaxAge are deleted at the next commit.
//
// Both are counted per side (runnel_edge_side_output_dropped_total). After
// the commit, dead letters and late records also go to the pipeline's
// dead_letter and late_output when it names one: the same JSON lines that
// `runnel-edge replay` writes, at most once (a crash between the commit
// and the write loses them there, not from the state file).

// Side output buckets and names.
const (
	bucketQuarantine = "quarantine"

	sideLate       = "late"
	sideDead       = "dead"
	sideQuarantine = "quarantine"
)

// sides is every side output: its name (for the CLI and metrics) and
// bucket, in the order metrics and health list them.
var sides = []struct{ name, bucket string }{
	{sideDead, bucketDead}, {sideLate, bucketLate}, {sideQuarantine, bucketQuarantine},
}

func sideIndex(name string) int {
	for i, s := range sides {
		if s.name == name {
			return i
		}
	}
	return -1
}

// Defaults of SideOutputs.
const (
	defaultSideBytes = 64 << 20
	defaultSideAge   = 7 * 24 * time.Hour
)

// sideKey is a side output's key: be64 Unix ms of its commit, be64 the
// checkpoint id (or, for a quarantined entry, its sequence number), be32
// its index in the commit. Keys of one side sort by commit time.
func sideKey(at time.Time, id uint64, n *uint32) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 20), uint64(at.UnixMilli()))
	k = binary.BigEndian.AppendUint64(k, id)
	k = binary.BigEndian.AppendUint32(k, *n)
	*n++
	return k
}

// sideTime is when the entry under k was committed. Keys written before
// side outputs were bounded (12 bytes: id and index) have no time: 0, the
// oldest.
func sideTime(k []byte) int64 {
	if len(k) != 20 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(k))
}

// sideStats is what the node knows of its side outputs; the writer
// goroutine changes it, metrics and health read it.
type sideStats struct {
	bytes       atomic.Int64 // keys and values in every side bucket
	sideBytes   [3]atomic.Int64
	entries     [3]atomic.Int64
	dropped     [3]atomic.Uint64 // by sides index: deleted to make room or for age
	added       [3]atomic.Uint64
	lastAt      [3]atomic.Int64 // Unix ms of the last entry added
	full        atomic.Int64    // Unix ms of the last drop for room (0: never)
	yielded     atomic.Uint64   // entries deleted for the disk cap (of dropped)
	yieldWarned atomic.Int64    // Unix ms of the last warning about yielding
	warned      [3]atomic.Int64 // Unix ms of the last warning about drops
}

// loadSide counts what the side buckets hold, at open.
func (n *node) loadSide(tx *state.Tx) error {
	for i, sd := range sides {
		b, err := tx.Bucket(sd.bucket)
		if err != nil {
			return err
		}
		var last int64
		err = b.ForEach(nil, func(k, v []byte) error {
			n.side.bytes.Add(int64(len(k) + len(v)))
			n.side.sideBytes[i].Add(int64(len(k) + len(v)))
			n.side.entries[i].Add(1)
			last = sideTime(k)
			return nil
		})
		if err != nil {
			return err
		}
		n.side.lastAt[i].Store(last)
	}
	return nil
}

// putSide adds one entry to side i within tx; the counters change with
// commitSide once tx committed.
type sideDelta struct {
	bytes     int64
	sideBytes [3]int64
	entries   [3]int64
	added     [3]uint64
	dropped   [3]uint64
	lastAt    [3]int64
	full      bool
	yielded   uint64
}

func (d *sideDelta) put(b *state.Bucket, i int, k, v []byte) error {
	if err := b.Put(k, v); err != nil {
		return err
	}
	d.bytes += int64(len(k) + len(v))
	d.sideBytes[i] += int64(len(k) + len(v))
	d.entries[i]++
	d.added[i]++
	d.lastAt[i] = max(d.lastAt[i], sideTime(k))
	return nil
}

// boundSide deletes, within tx, the side entries older than the age bound
// and then, while the side outputs with what d already added pass their
// byte bound, the oldest entry of the side that holds the most bytes: a
// flood of one kind (garbage payloads as dead letters) pushes out its own
// oldest entries, not the few quarantined results.
//
// Under a disk cap the side outputs also yield to the aggregates: their
// bound is at most the room the cap leaves beside the ingest log and the
// rest of the state file (with outboxAdded, what tx adds to the outbox),
// and entries deleted for that are counted as yielded.
func (n *node) boundSide(tx *state.Tx, d *sideDelta, now time.Time, outboxAdded int64) error {
	maxBytes, maxAge := n.sideLimits()
	oldest := int64(-1) // the age bound: entries committed before it go
	if maxAge > 0 {
		oldest = now.Add(-maxAge).UnixMilli()
	}
	ownBound := maxBytes
	if n.cfg.DiskCap > 0 {
		// The state file's pages but the side outputs' own values: the
		// rest of the state file (outbox, operator state, bbolt's pages)
		// and what tx adds to the outbox come first.
		room := n.cfg.DiskCap - n.log.Size() - (n.stateBytes() - n.side.bytes.Load()) - outboxAdded
		maxBytes = max(min(maxBytes, room), 0)
	}
	excess := n.side.bytes.Load() + d.bytes - maxBytes
	type victim struct {
		k    []byte
		at   int64
		size int64
	}
	held := make([]int64, len(sides)) // bytes per side, with d
	cand := make([][]victim, len(sides))
	buckets := make([]*state.Bucket, len(sides))
	for i := range sides {
		held[i] = n.side.sideBytes[i].Load() + d.sideBytes[i]
	}
	for i, sd := range sides {
		b, err := tx.Bucket(sd.bucket)
		if err != nil {
			return err
		}
		// Every entry too old, and enough of the oldest to cover the
		// excess should this side have to yield all of it.
		var vs []victim
		var taken int64
		err = b.ForEach(nil, func(k, v []byte) error {
			at := sideTime(k)
			if at >= oldest && taken >= excess {
				return errStopScan
			}
			size := int64(len(k) + len(v))
			taken += size
			vs = append(vs, victim{bytes.Clone(k), at, size})
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return err
		}
		cand[i], buckets[i] = vs, b
	}
	del := func(i int) error {
		v := cand[i][0]
		cand[i] = cand[i][1:]
		if err := buckets[i].Delete(v.k); err != nil {
			return err
		}
		d.bytes -= v.size
		d.sideBytes[i] -= v.size
		held[i] -= v.size
		d.entries[i]--
		d.dropped[i]++
		if v.at >= oldest {
			if n.side.bytes.Load()+d.bytes+v.size <= ownBound {
				d.yielded++ // within its own bound: deleted for the cap
			} else {
				d.full = true
			}
			excess -= v.size
		}
		return nil
	}
	for i := range sides {
		for len(cand[i]) > 0 && cand[i][0].at < oldest {
			if err := del(i); err != nil {
				return err
			}
		}
	}
	excess = n.side.bytes.Load() + d.bytes - maxBytes
	for excess > 0 {
		big := -1
		for i := range sides {
			if len(cand[i]) > 0 && (big < 0 || held[i] > held[big]) {
				big = i
			}
		}
		if big < 0 {
			return nil
		}
		if err := del(big); err != nil {
			return err
		}
	}
	return nil
}

// commitSide applies d to the counters after its transaction committed.
func (n *node) commitSide(d *sideDelta, now time.Time) {
	n.side.bytes.Add(d.bytes)
	for i := range sides {
		n.side.sideBytes[i].Add(d.sideBytes[i])
		n.side.entries[i].Add(d.entries[i])
		n.side.added[i].Add(d.added[i])
		n.side.dropped[i].Add(d.dropped[i])
		if d.lastAt[i] > 0 {
			n.side.lastAt[i].Store(d.lastAt[i])
		}
		if d.dropped[i] > 0 && now.UnixMilli()-n.side.warned[i].Load() >= time.Minute.Milliseconds() {
			n.side.warned[i].Store(now.UnixMilli())
			n.lg.Warn("edge: side output bound reached; dropping the oldest entries (logged once a minute)",
				"side", sides[i].name, "dropped_total", n.side.dropped[i].Load())
		}
	}
	if d.full {
		n.side.full.Store(now.UnixMilli())
	}
	n.side.yielded.Add(d.yielded)
	if d.yielded > 0 && now.UnixMilli()-n.side.yieldWarned.Load() >= time.Minute.Milliseconds() {
		n.side.yieldWarned.Store(now.UnixMilli())
		n.lg.Warn("edge: disk cap reached; side output entries deleted, oldest first, to leave the room to the aggregates (logged once a minute)",
			"deleted", d.yielded, "yielded_total", n.side.yielded.Load())
	}
}

func (n *node) sideLimits() (int64, time.Duration) {
	b, a := n.cfg.SideOutputs.MaxBytes, n.cfg.SideOutputs.MaxAge
	if b <= 0 {
		b = defaultSideBytes
	}
	switch {
	case a == 0:
		a = defaultSideAge
	case a < 0:
		a = 0 // no age bound
	}
	return b, a
}

// quarantine sets outbox entries aside (uplink.Outbox.Quarantine), on the
// writer goroutine: each entry is rendered with its reason into the
// quarantine bucket and its outbox value replaced by a tombstone, which
// the uplink sends as a sequence number only. Entries already gone (acked
// and deleted) or already quarantined are skipped.
func (n *node) quarantine(rs []uplink.Refused) error {
	now := time.Now()
	var d sideDelta
	var outboxDelta int64
	var idx uint32
	err := n.store.Update(func(tx *state.Tx) error {
		ob, err := tx.Bucket(bucketOutbox)
		if err != nil {
			return err
		}
		q, err := tx.Bucket(bucketQuarantine)
		if err != nil {
			return err
		}
		for _, r := range rs {
			k := binary.BigEndian.AppendUint64(nil, r.Seq)
			v, err := ob.Get(k)
			if err != nil {
				return err
			}
			if v == nil {
				continue
			}
			oe, derr := DecodeOutbox(r.Seq, v)
			if derr == nil && (oe.Quarantined || oe.Marker) {
				continue
			}
			line := n.appendQuarantinedJSON(nil, r, oe, derr, v, now)
			tomb := encodeTombstone(nil, oe.Pipeline)
			if err := d.put(q, sideIndex(sideQuarantine), sideKey(now, r.Seq, &idx), line); err != nil {
				return err
			}
			outboxDelta += int64(len(tomb) - len(v))
			if err := ob.Put(k, tomb); err != nil {
				return err
			}
		}
		return n.boundSide(tx, &d, now, outboxDelta)
	})
	if err != nil {
		return err
	}
	n.status.outboxBytes.Add(outboxDelta)
	n.commitSide(&d, now)
	return nil
}

// appendQuarantinedJSON renders a quarantined entry as its JSON line:
// {"seq","pipeline","reason","quarantined_at","result"} with the result
// as results are rendered, or "entry" (base64) when it does not render.
func (n *node) appendQuarantinedJSON(dst []byte, r uplink.Refused, oe OutboxEntry, derr error, raw []byte, at time.Time) []byte {
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, r.Seq, 10)
	dst = append(dst, `,"pipeline":`...)
	dst = strconv.AppendQuote(dst, oe.Pipeline)
	dst = append(dst, `,"reason":`...)
	dst = strconv.AppendQuote(dst, r.Reason)
	dst = append(dst, `,"quarantined_at":"`...)
	dst = at.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, '"')
	if ps := n.pipe(oe.Pipeline); derr == nil && ps != nil {
		if res, err := ps.p.AppendResultJSON(nil, &oe.Result, ps.p.Aggregates.New()); err == nil {
			dst = append(dst, `,"result":`...)
			return append(append(dst, res...), '}')
		}
	}
	dst = append(dst, `,"entry":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, raw)
	return append(dst, `"}`...)
}

// ReadSideOutput calls fn with every entry a stopped node holds of one side
// output, as JSON lines, oldest first: "late" (late records), "dead" (dead
// letters) or "quarantine" (outbox entries the hub will never accept).
func ReadSideOutput(dir, which string, fn func(line []byte) error) error {
	i := sideIndex(which)
	if i < 0 {
		return fmt.Errorf("edge: no side output %q (late, dead, quarantine)", which)
	}
	st, err := state.Open(dir+"/state.db", state.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	return st.View(func(tx *state.Tx) error {
		b, err := tx.Bucket(sides[i].bucket)
		if err != nil {
			return err
		}
		return b.ForEach(nil, func(_, v []byte) error { return fn(v) })
	})
}

// sideWriters writes a pipeline's committed dead letters and late records
// to its dead_letter and late_output: files and the standard streams at
// once, mqtt topics through the node's publisher queue.
type sideWriters struct {
	n          *node
	late, dead sideWriter
}

type sideWriter struct {
	w     *bufio.Writer // file, stdout or stderr
	f     *os.File      // file outputs, to close
	topic *spec.Output  // mqtt
}

func openSideWriters(n *node, p *operators.Pipeline) (*sideWriters, error) {
	sw := &sideWriters{n: n}
	for _, o := range []struct {
		out *spec.Output
		w   *sideWriter
	}{{p.Spec.LateOutput, &sw.late}, {p.Spec.DeadLetter, &sw.dead}} {
		if o.out == nil {
			continue
		}
		switch o.out.Kind {
		case spec.OutputFile:
			f, err := os.OpenFile(o.out.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				sw.close()
				return nil, fmt.Errorf("edge: pipeline %s: side output: %w", p.Name, err)
			}
			o.w.f, o.w.w = f, bufio.NewWriter(f)
		case spec.OutputStdout:
			o.w.w = bufio.NewWriter(os.Stdout)
		case spec.OutputStderr:
			o.w.w = bufio.NewWriter(os.Stderr)
		case spec.OutputMQTT:
			o.w.topic = o.out
		}
	}
	return sw, nil
}

// write hands committed lines to the outputs; errors are logged, never
// returned: the state file holds the lines whatever happens here.
func (sw *sideWriters) write(pipeline string, late, dead [][]byte) {
	for _, x := range []struct {
		w     *sideWriter
		lines [][]byte
	}{{&sw.late, late}, {&sw.dead, dead}} {
		if len(x.lines) == 0 {
			continue
		}
		if x.w.topic != nil {
			for _, l := range x.lines {
				sw.n.sidePublish(*x.w.topic, l)
			}
		}
		if x.w.w == nil {
			continue
		}
		for _, l := range x.lines {
			x.w.w.Write(l)
			x.w.w.WriteByte('\n')
		}
		if err := x.w.w.Flush(); err != nil {
			sw.n.lg.Error("edge: side output", "pipeline", pipeline, "err", err)
		}
	}
}

func (sw *sideWriters) close() {
	for _, w := range []*sideWriter{&sw.late, &sw.dead} {
		if w.f != nil {
			w.f.Close()
		}
	}
}

// sideMessage is a side output line for an mqtt output.
type sideMessage struct {
	out  spec.Output
	line []byte
}

// sidePublish queues a line for an mqtt side output; with the queue full
// (the broker is away or slow) the line is not published, counted: it
// stays in the state file.
func (n *node) sidePublish(o spec.Output, line []byte) {
	select {
	case n.sideQueue <- sideMessage{o, bytes.Clone(line)}:
	default:
		n.status.sidePublishDropped.Add(1)
	}
}

// runSidePublisher publishes queued side output lines until ctx is done.
// Each is tried for a few seconds at most, so that a broker that refuses
// one cannot hold the others back.
func (n *node) runSidePublisher(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-n.sideQueue:
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := n.publishRetrying(pctx, m.out, m.line, nil)
			cancel()
			if err != nil && ctx.Err() == nil {
				n.status.sidePublishDropped.Add(1)
			}
		}
	}
}

// encodeTombstone is the outbox value of a quarantined entry: kind 'q' and
// the pipeline.
func encodeTombstone(dst []byte, pipeline string) []byte {
	dst = append(dst, entryQuarantined)
	dst = binary.AppendUvarint(dst, uint64(len(pipeline)))
	return append(dst, pipeline...)
}
