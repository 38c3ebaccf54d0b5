package window

import (
	"errors"
	"fmt"
	"math"
)

// Event times and watermarks are int64 Unix milliseconds. MinTime is the
// watermark before any event; MaxTime is the watermark at end of input.
const (
	MinTime int64 = math.MinInt64
	MaxTime int64 = math.MaxInt64
)

// Kind is the shape of a window.
type Kind uint8

// The window kinds.
const (
	Tumbling Kind = iota + 1 // fixed size, no overlap: Slide == Size
	Sliding                  // fixed size, a new window every Slide
	Session                  // per key, closed by a Gap without events
)

func (k Kind) String() string {
	switch k {
	case Tumbling:
		return "tumbling"
	case Sliding:
		return "sliding"
	case Session:
		return "session"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ErrInvalid reports an Assigner or Config whose values cannot work.
var ErrInvalid = errors.New("window: invalid configuration")

// MaxSlices bounds the slices per sliding window (Size / gcd(Size, Slide)),
// which bounds the work of firing one window and the state per key.
const MaxSlices = 10000

// Assigner says which windows an event time belongs to. Aligned windows
// (tumbling and sliding) start at multiples of Slide since the Unix epoch;
// sessions are assigned per key by the Operator.
type Assigner struct {
	Kind  Kind
	Size  int64 // window length in ms (aligned kinds)
	Slide int64 // distance between window starts in ms (aligned kinds)
	Gap   int64 // session gap in ms
}

// TumblingWindows returns an Assigner of back-to-back windows of size ms.
func TumblingWindows(size int64) Assigner { return Assigner{Kind: Tumbling, Size: size, Slide: size} }

// SlidingWindows returns an Assigner of windows of size ms starting every slide ms.
func SlidingWindows(size, slide int64) Assigner {
	return Assigner{Kind: Sliding, Size: size, Slide: slide}
}

// SessionWindows returns an Assigner of per-key sessions closed by gap ms without events.
func SessionWindows(gap int64) Assigner { return Assigner{Kind: Session, Gap: gap} }

// Validate reports whether the Assigner can be used.
func (a Assigner) Validate() error {
	switch a.Kind {
	case Tumbling, Sliding:
		if a.Size <= 0 || a.Slide <= 0 {
			return fmt.Errorf("%w: %s window needs size and slide > 0, got %d and %d", ErrInvalid, a.Kind, a.Size, a.Slide)
		}
		if a.Slide > a.Size {
			return fmt.Errorf("%w: slide %dms is longer than size %dms", ErrInvalid, a.Slide, a.Size)
		}
		if a.Kind == Tumbling && a.Slide != a.Size {
			return fmt.Errorf("%w: tumbling window needs slide == size", ErrInvalid)
		}
		if n := a.Size / gcd(a.Size, a.Slide); n > MaxSlices {
			return fmt.Errorf("%w: %d slices per window (more than %d)", ErrInvalid, n, MaxSlices)
		}
	case Session:
		if a.Gap <= 0 {
			return fmt.Errorf("%w: session gap must be > 0, got %d", ErrInvalid, a.Gap)
		}
	default:
		return fmt.Errorf("%w: unknown window kind %d", ErrInvalid, a.Kind)
	}
	return nil
}

// slicing is the arithmetic of aligned windows. A window is the union of
// Size/g consecutive slices of length g = gcd(Size, Slide); slice and window
// ends are what the operator stores and fires by.
type slicing struct {
	size, slide, g int64
}

func newSlicing(a Assigner) slicing {
	return slicing{size: a.Size, slide: a.Slide, g: gcd(a.Size, a.Slide)}
}

// sliceEnd returns the end of the slice holding t.
func (s slicing) sliceEnd(t int64) int64 { return floorDiv(t, s.g)*s.g + s.g }

// firstEnd returns the end of the earliest window that contains the slice
// ending at se: the smallest window end >= se.
func (s slicing) firstEnd(se int64) int64 { return s.endAtOrAfter(se) }

// lastEnd returns the end of the latest window that contains the slice
// ending at se: that window starts at the last multiple of slide <= se-g.
func (s slicing) lastEnd(se int64) int64 {
	return floorDiv(se-s.g, s.slide)*s.slide + s.size
}

// endAtOrAfter returns the smallest window end >= t. Window ends are
// k*slide + size.
func (s slicing) endAtOrAfter(t int64) int64 {
	k := floorDiv(t-s.size+s.slide-1, s.slide) // ceil((t-size)/slide)
	return k*s.slide + s.size
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// floorDiv divides rounding toward negative infinity, so windows align the
// same way before and after the epoch.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// addSat adds without overflowing past MinTime or MaxTime.
func addSat(a, b int64) int64 {
	c := a + b
	if b > 0 && c < a {
		return MaxTime
	}
	if b < 0 && c > a {
		return MinTime
	}
	return c
}
