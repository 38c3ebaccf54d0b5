package oracle

import (
	"cmp"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The properties below check Run against facts that follow from the
// definition but are computed another way: watermarks from a running
// maximum, window starts by scanning, sessions as connected components of
// a graph. Times are kept small so that the test arithmetic needs no
// overflow care; the extremes are covered by table tests.

var kinds = []Kind{Tumbling, Sliding, Session}

// genConfig draws a valid Config of kind k with small parameters, so that
// windows, watermark jumps and lateness are all of the order of the gaps
// between event times.
func genConfig(t *rapid.T, k Kind) Config {
	c := Config{
		Kind:          k,
		MaxOutOfOrder: rapid.Int64Range(0, 20).Draw(t, "maxOutOfOrder"),
		Lateness:      rapid.Int64Range(0, 30).Draw(t, "lateness"),
	}
	switch k {
	case Tumbling:
		c.Size = rapid.Int64Range(1, 20).Draw(t, "size")
		c.Slide = rapid.SampledFrom([]int64{0, c.Size}).Draw(t, "slide")
	case Sliding:
		c.Size = rapid.Int64Range(1, 20).Draw(t, "size")
		c.Slide = rapid.Int64Range(0, c.Size).Draw(t, "slide")
	case Session:
		c.Gap = rapid.Int64Range(1, 15).Draw(t, "gap")
	}
	return c
}

// genEvents draws an out-of-order stream over up to three keys: times
// drift upwards at a random pace with random jitter, so the watermark
// moves, windows fire and purge, and late events happen.
func genEvents(t *rapid.T) []Event {
	n := rapid.IntRange(0, 60).Draw(t, "n")
	drift := rapid.Int64Range(0, 4).Draw(t, "drift")
	jitter := rapid.Int64Range(0, 40).Draw(t, "jitter")
	keys := rapid.SampledFrom([]string{"a", "b", "c"})
	noise := rapid.Int64Range(-jitter, jitter)
	events := make([]Event, n)
	for i := range events {
		events[i] = Event{Key: keys.Draw(t, "key"), Time: int64(i)*drift + noise.Draw(t, "time")}
	}
	return events
}

// refWatermarks returns the watermark after each event, and +inf at index
// len(events).
func refWatermarks(events []Event, cfg Config) []int64 {
	wms := make([]int64, len(events)+1)
	maxT := int64(math.MinInt64)
	for i, e := range events {
		maxT = max(maxT, e.Time)
		wms[i] = maxT - cfg.MaxOutOfOrder
	}
	wms[len(events)] = math.MaxInt64
	return wms
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// refStarts finds the aligned windows holding t by scanning the
// multiples of slide around t.
func refStarts(t int64, cfg Config) []int64 {
	slide := cmp.Or(cfg.Slide, cfg.Size)
	var out []int64
	for k := floorDiv(t, slide) - cfg.Size/slide - 2; k <= floorDiv(t, slide)+1; k++ {
		if s := k * slide; s <= t && t < s+cfg.Size {
			out = append(out, s)
		}
	}
	return out
}

func sharesMember(a, b []int) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// isStrictSubset reports whether a is a proper subset of b (both ascending).
func isStrictSubset(a, b []int) bool {
	if len(a) >= len(b) {
		return false
	}
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			return false
		}
	}
	return true
}

// sameWindow says whether a, emitted before b, is an earlier state of the
// window b: for aligned windows the same key and Start; for sessions the
// same key and a shared event (events leave a session only when it is
// purged, so a shared event means b grew out of a).
func sameWindow(kind Kind, a, b Emission) bool {
	if a.Key != b.Key {
		return false
	}
	if kind == Session {
		return sharesMember(a.Members, b.Members)
	}
	return a.Start == b.Start
}

// checkEmissions checks what holds for every kind and every stream.
func checkEmissions(t *rapid.T, events []Event, cfg Config, ems []Emission, late []int) {
	n := len(events)
	wms := refWatermarks(events, cfg)
	isLate := make([]bool, n)
	for j, i := range late {
		if i < 0 || i >= n || (j > 0 && late[j-1] >= i) {
			t.Fatalf("late %v: not ascending indices into %d events", late, n)
		}
		isLate[i] = true
	}
	for x, e := range ems {
		if e.Step < 0 || e.Step > n || (x > 0 && ems[x-1].Step > e.Step) {
			t.Fatalf("emission %d: step %d out of order or range", x, e.Step)
		}
		if e.End > wms[e.Step] {
			t.Fatalf("emission %d: End %d but watermark %d at step %d", x, e.End, wms[e.Step], e.Step)
		}
		if x > 0 && ems[x-1].Step == e.Step {
			p := ems[x-1]
			if cmp.Or(cmp.Compare(p.End, e.End), cmp.Compare(p.Key, e.Key), cmp.Compare(p.Start, e.Start)) >= 0 {
				t.Fatalf("emissions %d and %d of step %d not strictly by (End, Key, Start)", x-1, x, e.Step)
			}
		}
		if len(e.Members) == 0 {
			t.Fatalf("emission %d: no members", x)
		}
		for j, m := range e.Members {
			if m < 0 || m >= n || (j > 0 && e.Members[j-1] >= m) {
				t.Fatalf("emission %d: members %v not ascending indices", x, e.Members)
			}
			if m > e.Step {
				t.Fatalf("emission %d at step %d holds event %d from the future", x, e.Step, m)
			}
			if isLate[m] {
				t.Fatalf("emission %d holds late event %d", x, m)
			}
			if events[m].Key != e.Key {
				t.Fatalf("emission %d of key %q holds event %d of key %q", x, e.Key, m, events[m].Key)
			}
		}
		checkShape(t, x, events, cfg, e)

		// A window fires at the first step whose watermark reaches its
		// End, not later. An emission that does not hold the step's own
		// event is a fire-phase emission (the assign phase comes after),
		// so its End was still ahead of the previous step's watermark.
		if fired := e.Step == n || !slices.Contains(e.Members, e.Step); fired && (e.Step == 0 || e.End <= wms[e.Step-1]) {
			t.Fatalf("emission %d: fired at step %d, but End %d was reached earlier", x, e.Step, e.End)
		}

		// Versions count up from the latest earlier state of the same
		// window, and every earlier state is a strict subset.
		version := 0
		for _, a := range ems[:x] {
			if !sameWindow(cfg.Kind, a, e) {
				continue
			}
			version = max(version, a.Version)
			if a.Step == e.Step {
				t.Fatalf("emission %d: window emitted twice at step %d", x, e.Step)
			}
			if !isStrictSubset(a.Members, e.Members) {
				t.Fatalf("emission %d %v does not strictly grow version %d %v", x, e.Members, a.Version, a.Members)
			}
		}
		if e.Version != version+1 {
			t.Fatalf("emission %d: version %d, want %d", x, e.Version, version+1)
		}
	}
}

// checkShape checks that an emission's bounds match its members.
func checkShape(t *rapid.T, x int, events []Event, cfg Config, e Emission) {
	if cfg.Kind != Session {
		slide := cmp.Or(cfg.Slide, cfg.Size)
		if e.End-e.Start != cfg.Size || floorDiv(e.Start, slide)*slide != e.Start {
			t.Fatalf("emission %d: [%d, %d) is not a window of size %d, slide %d", x, e.Start, e.End, cfg.Size, slide)
		}
		for _, m := range e.Members {
			if tm := events[m].Time; tm < e.Start || tm >= e.End {
				t.Fatalf("emission %d: event %d at %d outside [%d, %d)", x, m, tm, e.Start, e.End)
			}
		}
		return
	}
	times := make([]int64, len(e.Members))
	for j, m := range e.Members {
		times[j] = events[m].Time
	}
	slices.Sort(times)
	if e.Start != times[0] || e.End != times[len(times)-1]+cfg.Gap {
		t.Fatalf("emission %d: [%d, %d) but times %v and gap %d", x, e.Start, e.End, times, cfg.Gap)
	}
	for j := 1; j < len(times); j++ {
		if times[j]-times[j-1] >= cfg.Gap {
			t.Fatalf("emission %d: times %v are not one chain with gap %d", x, times, cfg.Gap)
		}
	}
}

// checkAligned checks acceptance window by window: an event is in the
// final state of each of its windows that was still open when it
// arrived, in none of the others, and late iff there were none.
func checkAligned(t *rapid.T, events []Event, cfg Config, ems []Emission, late []int) {
	wms := refWatermarks(events, cfg)
	type win struct {
		key   string
		start int64
	}
	last := map[win]Emission{}
	for _, e := range ems {
		last[win{e.Key, e.Start}] = e
	}
	for i, e := range events {
		open := 0
		for _, s := range refStarts(e.Time, cfg) {
			w := win{e.Key, s}
			if s+cfg.Size+cfg.Lateness > wms[i] {
				open++
				if !slices.Contains(last[w].Members, i) {
					t.Fatalf("event %d (%s@%d) not in the last emission of open window [%d, %d)", i, e.Key, e.Time, s, s+cfg.Size)
				}
				// And it is emitted as soon as the window is complete: at
				// once if it already is, else when the watermark gets there.
				due := i
				for s+cfg.Size > wms[due] {
					due++
				}
				if !slices.ContainsFunc(ems, func(em Emission) bool {
					return em.Step == due && em.Key == e.Key && em.Start == s && slices.Contains(em.Members, i)
				}) {
					t.Fatalf("event %d (%s@%d): window [%d, %d) not emitted with it at step %d", i, e.Key, e.Time, s, s+cfg.Size, due)
				}
				continue
			}
			for x, em := range ems {
				if em.Key == e.Key && em.Start == s && slices.Contains(em.Members, i) {
					t.Fatalf("emission %d holds event %d but its window [%d, %d) had expired (wm %d)", x, i, s, s+cfg.Size, wms[i])
				}
			}
		}
		if isLate := slices.Contains(late, i); isLate != (open == 0) {
			t.Fatalf("event %d (%s@%d): late=%v but %d open windows", i, e.Key, e.Time, isLate, open)
		}
	}
}

// checkSessions checks that accepted events reach an emission, that late
// events were past their lateness, and that the live sessions of a key
// never overlap.
func checkSessions(t *rapid.T, events []Event, cfg Config, ems []Emission, late []int) {
	wms := refWatermarks(events, cfg)
	seen := make([]bool, len(events))
	for _, e := range ems {
		for _, m := range e.Members {
			seen[m] = true
		}
	}
	for i, e := range events {
		if slices.Contains(late, i) {
			if e.Time+cfg.Gap+cfg.Lateness > wms[i] {
				t.Fatalf("event %d (%s@%d) late while its own window was within lateness (wm %d)", i, e.Key, e.Time, wms[i])
			}
		} else if !seen[i] {
			t.Fatalf("event %d (%s@%d) accepted but never emitted", i, e.Key, e.Time)
		}
	}

	// Replay the emissions keeping, per key, the latest emission of every
	// session. A new emission replaces those it shares events with; it
	// must not overlap any other whose session may still be live.
	current := map[string][]Emission{}
	for x, b := range ems {
		wm := wms[min(b.Step, len(events)-1)] // no purge at the end of input
		cur := slices.DeleteFunc(current[b.Key], func(a Emission) bool { return sharesMember(a.Members, b.Members) })
		for _, a := range cur {
			if a.End+cfg.Lateness > wm && a.Start < b.End && b.Start < a.End {
				t.Fatalf("emission %d %q [%d, %d) overlaps live session [%d, %d) emitted at step %d",
					x, b.Key, b.Start, b.End, a.Start, a.End, a.Step)
			}
		}
		current[b.Key] = append(cur, b)
	}
}

func checkRun(t *rapid.T, events []Event, cfg Config) ([]Emission, []int) {
	ems, late := Run(events, cfg)
	checkEmissions(t, events, cfg, ems, late)
	if cfg.Kind == Session {
		checkSessions(t, events, cfg, ems, late)
	} else {
		checkAligned(t, events, cfg, ems, late)
	}
	again, againLate := Run(events, cfg)
	if !reflect.DeepEqual(ems, again) || !reflect.DeepEqual(late, againLate) {
		t.Fatalf("Run is not deterministic")
	}
	return ems, late
}

func TestProperties(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.String(), rapid.MakeCheck(func(t *rapid.T) {
			checkRun(t, genEvents(t), genConfig(t, k))
		}))
	}
}

// With MaxOutOfOrder covering the whole spread of event times and no
// lateness, the watermark never passes an event's window: nothing is late.
func TestPropertyNoLateWithinBound(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.String(), rapid.MakeCheck(func(t *rapid.T) {
			events := genEvents(t)
			cfg := genConfig(t, k)
			cfg.Lateness = 0
			cfg.MaxOutOfOrder = spread(events) + rapid.Int64Range(0, 10).Draw(t, "extra")
			if _, late := checkRun(t, events, cfg); len(late) != 0 {
				t.Fatalf("late events %v with MaxOutOfOrder %d >= spread", late, cfg.MaxOutOfOrder)
			}
		}))
	}
}

func spread(events []Event) int64 {
	if len(events) == 0 {
		return 0
	}
	lo, hi := events[0].Time, events[0].Time
	for _, e := range events {
		lo, hi = min(lo, e.Time), max(hi, e.Time)
	}
	return hi - lo
}

// With lateness beyond every watermark nothing is ever purged or late, so
// the final state of every window is the batch answer over all events:
// grouping by window for aligned kinds, connected components for sessions.
func TestPropertyUnboundedLatenessIsBatch(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.String(), rapid.MakeCheck(func(t *rapid.T) {
			events := genEvents(t)
			cfg := genConfig(t, k)
			cfg.Lateness = 1 << 40
			ems, late := checkRun(t, events, cfg)
			if len(late) != 0 {
				t.Fatalf("late events %v with unbounded lateness", late)
			}
			var got, want []string // member lists, as text, sorted
			if k == Session {
				for x, b := range ems {
					final := true
					for _, later := range ems[x+1:] {
						if later.Key == b.Key && sharesMember(b.Members, later.Members) {
							final = false
						}
					}
					if final {
						got = append(got, fmt.Sprint(b.Members))
					}
				}
				for _, c := range components(events, cfg.Gap) {
					want = append(want, fmt.Sprint(c))
				}
			} else {
				last := map[string][]int{}
				for _, e := range ems {
					last[fmt.Sprintf("%s %d", e.Key, e.Start)] = e.Members
				}
				for _, m := range last {
					got = append(got, fmt.Sprint(m))
				}
				batch := map[string][]int{}
				for i, e := range events {
					for _, s := range refStarts(e.Time, cfg) {
						w := fmt.Sprintf("%s %d", e.Key, s)
						batch[w] = append(batch[w], i)
					}
				}
				for _, m := range batch {
					want = append(want, fmt.Sprint(m))
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("final windows\n got %v\nwant %v", got, want)
			}
		}))
	}
}

// components groups events into sessions the way the definition reads:
// connected components of the graph linking two events of a key whose
// times differ by less than gap. Each component is ascending.
func components(events []Event, gap int64) [][]int {
	parent := make([]int, len(events))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if parent[i] != i {
			parent[i] = find(parent[i])
		}
		return parent[i]
	}
	for i := range events {
		for j := range i {
			d := events[i].Time - events[j].Time
			if events[i].Key == events[j].Key && d < gap && -d < gap {
				parent[find(i)] = find(j)
			}
		}
	}
	groups := map[int][]int{}
	for i := range events {
		groups[find(i)] = append(groups[find(i)], i)
	}
	var out [][]int
	for _, g := range groups {
		out = append(out, g)
	}
	return out
}

// A tumbling window is a sliding window whose slide is its size.
func TestPropertyTumblingIsSlidingBySize(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		events := genEvents(t)
		cfg := genConfig(t, Tumbling)
		tumbling, tLate := Run(events, cfg)
		cfg.Kind, cfg.Slide = Sliding, cfg.Size
		sliding, sLate := Run(events, cfg)
		if !reflect.DeepEqual(tumbling, sliding) || !reflect.DeepEqual(tLate, sLate) {
			t.Fatalf("tumbling and sliding with slide = size differ:%s\nvs%s", fmtEmissions(tumbling), fmtEmissions(sliding))
		}
	})
}
