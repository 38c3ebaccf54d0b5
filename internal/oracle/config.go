package oracle

import (
	"errors"
	"fmt"
)

// Kind is the shape of a window.
type Kind int

// The window kinds. The zero Kind is Tumbling.
const (
	Tumbling Kind = iota // back-to-back windows of Size ms
	Sliding              // windows of Size ms starting every Slide ms
	Session              // per key, closed by Gap ms without events
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
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Config is the window and watermark setup that Run simulates. Fields that
// do not apply to the Kind are ignored (Size and Slide for sessions, Gap
// for aligned windows).
type Config struct {
	Kind          Kind
	Size, Slide   int64 // ms; aligned kinds; Slide 0 means Size, tumbling needs Slide == Size
	Gap           int64 // ms, session only
	MaxOutOfOrder int64 // ms >= 0; the watermark trails the largest event time by this much
	Lateness      int64 // allowed lateness, ms >= 0; how long after End a window still takes events
}

// ErrInvalidConfig marks every problem Config.Validate reports. Run panics
// with it rather than returning it, as the oracle only runs inside tests.
var ErrInvalidConfig = errors.New("oracle: invalid config")

// Validate reports every problem of c at once, each wrapping
// ErrInvalidConfig, or nil if Run can use c.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	switch c.Kind {
	case Tumbling, Sliding:
		if c.Size <= 0 {
			bad("%s: Size must be > 0, got %d", c.Kind, c.Size)
		}
		if c.Slide < 0 {
			bad("%s: Slide must be >= 0, got %d", c.Kind, c.Slide)
		}
		if c.Size > 0 && c.Slide > c.Size {
			// An event in the hole between two windows would belong to no
			// window, and the rules would call it late.
			bad("%s: Slide %d is longer than Size %d", c.Kind, c.Slide, c.Size)
		}
		if c.Kind == Tumbling && c.Slide != 0 && c.Slide != c.Size {
			bad("tumbling: Slide must be 0 or Size (%d), got %d", c.Size, c.Slide)
		}
	case Session:
		if c.Gap <= 0 {
			bad("session: Gap must be > 0, got %d", c.Gap)
		}
	default:
		bad("unknown Kind %d", int(c.Kind))
	}
	if c.MaxOutOfOrder < 0 {
		bad("MaxOutOfOrder must be >= 0, got %d", c.MaxOutOfOrder)
	}
	if c.Lateness < 0 {
		bad("Lateness must be >= 0, got %d", c.Lateness)
	}
	return errors.Join(errs...)
}

// slide is the distance between window starts, with the zero default applied.
func (c Config) slide() int64 {
	if c.Slide == 0 {
		return c.Size
	}
	return c.Slide
}
