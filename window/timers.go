package window

// timers is the operator's single timer mechanism: for every key that has
// something to do at a future watermark (fire a window, purge state, forget an
// idle key) one registration at that time. Registrations are grouped in
// buckets by time, so the many keys of one aligned window end share one bucket
// and one heap entry; sessions, whose ends differ per key, get small buckets.
//
// A key is registered at exactly one time, its sessionKey.due. Moving it earlier
// adds it to the earlier bucket and leaves a stale entry behind; popping a
// bucket skips entries whose due no longer matches (lazy deletion), so no
// bucket is ever searched.
type timers struct {
	heap    []int64 // bucket times, min-heap
	buckets map[int64]*bucket
	free    []*bucket
}

type bucket struct {
	keys []int32
}

func newTimers() timers {
	return timers{buckets: make(map[int64]*bucket)}
}

// add registers k at time t (k.due must already be t).
func (tm *timers) add(t int64, k int32) {
	b, ok := tm.buckets[t]
	if !ok {
		if n := len(tm.free); n > 0 {
			b = tm.free[n-1]
			tm.free = tm.free[:n-1]
		} else {
			b = &bucket{}
		}
		tm.buckets[t] = b
		tm.push(t)
	}
	b.keys = append(b.keys, k)
}

// next returns the earliest bucket time, or MaxTime and false when empty.
func (tm *timers) next() (int64, bool) {
	if len(tm.heap) == 0 {
		return MaxTime, false
	}
	return tm.heap[0], true
}

// pop removes the earliest bucket and returns its time and keys. The keys
// slice is valid until release.
func (tm *timers) pop() (int64, *bucket) {
	t := tm.heap[0]
	n := len(tm.heap) - 1
	tm.heap[0] = tm.heap[n]
	tm.heap = tm.heap[:n]
	tm.down(0)
	b := tm.buckets[t]
	delete(tm.buckets, t)
	return t, b
}

func (tm *timers) release(b *bucket) {
	b.keys = b.keys[:0]
	tm.free = append(tm.free, b)
}

func (tm *timers) push(t int64) {
	tm.heap = append(tm.heap, t)
	i := len(tm.heap) - 1
	for i > 0 {
		p := (i - 1) / 2
		if tm.heap[p] <= tm.heap[i] {
			break
		}
		tm.heap[p], tm.heap[i] = tm.heap[i], tm.heap[p]
		i = p
	}
}

func (tm *timers) down(i int) {
	n := len(tm.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && tm.heap[r] < tm.heap[l] {
			m = r
		}
		if tm.heap[i] <= tm.heap[m] {
			return
		}
		tm.heap[i], tm.heap[m] = tm.heap[m], tm.heap[i]
		i = m
	}
}
