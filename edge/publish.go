package edge

import (
	"context"
	"fmt"
	"time"

	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/window/aggregate"
)

// MQTT outputs. A pipeline's mqtt outputs publish its window results on
// the broker the node reads from, after the checkpoint that covers them
// commits: the publisher is a reader of the committed outbox with its own
// cursor, like the uplink. The cursor (the last sequence number published)
// is stored with each checkpoint, and the outbox keeps an entry until
// every reader is past it. A crash between a publish and the next
// checkpoint publishes those results again: publication is at-least-once,
// and each message carries the user property result_id
// ("<edge id>/<sequence number>"), the same on every attempt, for
// consumers to drop repeats.

const keyPublished = "mqtt_published"

// pipeToHub reports whether pipeline sends its results to the hub.
func (n *node) pipeToHub(pipeline string) bool {
	ps := n.pipe(pipeline)
	return ps != nil && ps.toHub
}

// deletableUpTo is the highest outbox sequence every reader is past (0:
// none, or no reader runs: then the outbox is kept whole).
func (n *node) deletableUpTo() uint64 {
	upTo, readers := ^uint64(0), 0
	if n.cfg.Uplink != nil {
		upTo, readers = min(upTo, n.uplinkAck.Load()), readers+1
	}
	if n.publishes {
		upTo, readers = min(upTo, n.published.Load()), readers+1
	}
	if readers == 0 {
		return 0
	}
	return upTo
}

// runPublisher publishes committed results to the pipelines' mqtt outputs
// until ctx is done.
func (n *node) runPublisher(ctx context.Context) error {
	ob := outboxView{n}
	st := map[string]*aggregate.State{} // rendering scratch per pipeline
	type job struct {
		seq uint64
		ps  *pipe // nil: nothing to publish (a marker, or no mqtt output)
		r   operators.Result
	}
	var jobs []job
	var payload []byte
	for {
		next, grew := ob.Committed()
		from := n.published.Load() + 1
		if from >= next {
			select {
			case <-ctx.Done():
				return nil
			case <-grew:
			}
			continue
		}
		// Copy a chunk out: no read transaction stays open while the
		// broker is slow.
		jobs = jobs[:0]
		err := ob.Read(from, func(e *uplink.Entry) bool {
			if e.Seq >= next || len(jobs) == 256 {
				return false
			}
			j := job{seq: e.Seq}
			if ps := n.pipe(e.Pipeline); !e.Marker && ps != nil && len(ps.mqtt) > 0 {
				j.ps = ps
				j.r = operators.Result{Key: append([]byte(nil), e.Key...), Start: e.Start, End: e.End,
					Version: e.Version, State: append([]byte(nil), e.State...)}
			}
			jobs = append(jobs, j)
			return true
		})
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if ps := j.ps; ps != nil {
				if st[ps.p.Name] == nil {
					st[ps.p.Name] = ps.p.Aggregates.New()
				}
				if payload, err = ps.p.AppendResultJSON(payload[:0], &j.r, st[ps.p.Name]); err != nil {
					return fmt.Errorf("edge: render result %d: %w", j.seq, err)
				}
				props := map[string]string{"result_id": fmt.Sprintf("%s/%d", n.cfg.EdgeID, j.seq)}
				for _, o := range ps.mqtt {
					if err := n.publishRetrying(ctx, o, payload, props); err != nil {
						return nil // ctx done
					}
				}
			}
			n.published.Store(j.seq)
		}
	}
}

// publishRetrying publishes until the broker takes the message or ctx
// ends, backing off while the source is not connected.
func (n *node) publishRetrying(ctx context.Context, o spec.Output, payload []byte, props map[string]string) error {
	wait := 100 * time.Millisecond
	for {
		src := n.status.src.Load()
		var err error
		if src == nil {
			err = fmt.Errorf("no MQTT source yet")
		} else {
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = src.Publish(pctx, o.Topic, payload, byte(o.QoS), o.Retain, props)
			cancel()
		}
		if err == nil {
			n.status.published.Add(1)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n.status.publishErrs.Add(1)
		n.lg.Warn("edge: mqtt output: publish failed; retrying", "topic", o.Topic, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}
