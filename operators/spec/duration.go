package spec

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
)

// Duration is a span of event time in milliseconds, the resolution of event
// time in runnel. Keeping it in whole milliseconds means window bounds,
// slices and lateness are exact integers on every edge and on the hub.
type Duration int64

// Std converts d to a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) * time.Millisecond }

// maxDuration is the largest Duration that still converts to a time.Duration
// without overflow (about 292 years).
const maxDuration = Duration(math.MaxInt64 / int64(time.Millisecond))

const (
	msPerSecond = 1000
	msPerMinute = 60 * msPerSecond
	msPerHour   = 60 * msPerMinute
	msPerDay    = 24 * msPerHour
)

// String renders d in the spec's own syntax, largest units first, so that
// ParseDuration(d.String()) == d: 90000 -> "1m30s", 172800000 -> "2d",
// 1500 -> "1s500ms".
func (d Duration) String() string {
	if d == 0 {
		return "0s"
	}
	var b strings.Builder
	u := uint64(d)
	if d < 0 {
		b.WriteByte('-')
		u = -u // two's complement; also right for math.MinInt64
	}
	for _, unit := range []struct {
		ms   uint64
		name string
	}{{msPerDay, "d"}, {msPerHour, "h"}, {msPerMinute, "m"}, {msPerSecond, "s"}, {1, "ms"}} {
		if n := u / unit.ms; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, unit.name)
			u %= unit.ms
		}
	}
	return b.String()
}

// durationUnits maps unit suffixes to nanoseconds: Go's time.ParseDuration
// units plus "d" for days of 24 hours.
var durationUnits = map[string]int64{
	"ns": 1,
	"us": 1e3, "µs": 1e3, "μs": 1e3, // U+00B5 and U+03BC, as time.ParseDuration
	"ms": 1e6,
	"s":  1e9,
	"m":  60e9,
	"h":  3600e9,
	"d":  86400e9,
}

// maxDurationLen bounds the text of a duration: real ones are a few
// characters, and exact arithmetic on a megabyte of digits is slow.
const maxDurationLen = 64

// errNoUnit is returned (wrapped) for a bare number such as "30".
var errNoUnit = errors.New("missing unit")

// ParseDuration parses Go duration syntax ("500ms", "1m30s", "1.5h") plus a
// "d" suffix for days of 24 hours ("2d", "1d12h"). A bare "0" is accepted.
// The result must be a whole number of milliseconds: "1.5ms" and "100us"
// are refused rather than rounded, because silently changing a window size
// would change results. Negative durations parse; callers decide whether
// they are allowed.
func ParseDuration(s string) (Duration, error) {
	orig := s
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return 0, nil
	}
	if s == "" {
		return 0, fmt.Errorf("invalid duration %q: empty", orig)
	}
	if len(s) > maxDurationLen {
		return 0, fmt.Errorf("invalid duration %.20q...: longer than %d characters", orig, maxDurationLen)
	}
	// Exact rational arithmetic: a spec is parsed once, and float rounding
	// could turn "0.3s" into 299.99999ms and a wrong refusal.
	total := new(big.Rat)
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		num := s[:i]
		if num == "" || num == "." || strings.Count(num, ".") > 1 {
			return 0, fmt.Errorf("invalid duration %q: expected a number at %q", orig, s)
		}
		s = s[i:]
		j := 0
		for j < len(s) && !(s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
			j++
		}
		unit := s[:j]
		s = s[j:]
		if unit == "" {
			return 0, fmt.Errorf("invalid duration %q: %w (write e.g. %ss or %sms)", orig, errNoUnit, num, num)
		}
		ns, ok := durationUnits[unit]
		if !ok {
			return 0, fmt.Errorf("invalid duration %q: unknown unit %q (use ms, s, m, h or d)", orig, unit)
		}
		v, ok := new(big.Rat).SetString(num)
		if !ok {
			return 0, fmt.Errorf("invalid duration %q: bad number %q", orig, num)
		}
		total.Add(total, v.Mul(v, new(big.Rat).SetInt64(ns)))
	}
	ms := total.Quo(total, big.NewRat(1e6, 1))
	if !ms.IsInt() {
		return 0, fmt.Errorf("%s is not a whole number of milliseconds (event time resolution is 1ms)", orig)
	}
	n := ms.Num()
	if !n.IsInt64() || Duration(n.Int64()) > maxDuration {
		return 0, fmt.Errorf("duration %s is out of range (at most %s)", orig, maxDuration)
	}
	d := Duration(n.Int64())
	if neg {
		d = -d
	}
	return d, nil
}
