package spec

import (
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Duration
		err  string // substring; "" = valid
	}{
		{in: "0", want: 0},
		{in: "0s", want: 0},
		{in: "-0", want: 0},
		{in: "500ms", want: 500},
		{in: "1s", want: 1000},
		{in: "1m30s", want: 90000},
		{in: "1.5h", want: 5400000},
		{in: ".5s", want: 500},
		{in: "2d", want: 172800000},
		{in: "1d12h", want: 129600000},
		{in: "0.5d", want: 43200000},
		{in: "1000us", want: 1},
		{in: "1000µs", want: 1},
		{in: "2000000ns", want: 2},
		{in: "0.3s", want: 300},
		{in: "+5s", want: 5000},
		{in: "-5s", want: -5000},
		{in: "1h1h", want: 7200000}, // as time.ParseDuration: units add up
		{in: "", err: "empty"},
		{in: "-", err: "empty"},
		{in: "5", err: "missing unit"},
		{in: "1m30", err: "missing unit"},
		{in: "5x", err: `unknown unit "x"`},
		{in: "5 s", err: `unknown unit " s"`},
		{in: "s", err: "expected a number"},
		{in: "1..5s", err: "expected a number"},
		{in: ".s", err: "expected a number"},
		{in: "1.5ms", err: "not a whole number of milliseconds"},
		{in: "100us", err: "not a whole number of milliseconds"},
		{in: "1ns", err: "not a whole number of milliseconds"},
		{in: "300000d", err: "out of range"},
		{in: "99999999999999999999999ms", err: "out of range"},
	} {
		got, err := ParseDuration(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseDuration(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseDuration(%q) = %d, %v; want error containing %q", tc.in, got, err, tc.err)
		}
	}
}

// TestDurationAgreesWithTime checks ParseDuration against time.ParseDuration
// on the syntax they share.
func TestDurationAgreesWithTime(t *testing.T) {
	for _, s := range []string{"1ms", "1s", "1m", "1h", "1h2m3s4ms", "2.5s", "0.001s", "72h", "1.25m", "-3m"} {
		got, err := ParseDuration(s)
		want, werr := time.ParseDuration(s)
		if err != nil || werr != nil || got.Std() != want {
			t.Errorf("%s: ParseDuration = %v (%v), time.ParseDuration = %v (%v)", s, got.Std(), err, want, werr)
		}
	}
}

func TestDurationString(t *testing.T) {
	for _, tc := range []struct {
		d    Duration
		want string
	}{
		{0, "0s"},
		{1, "1ms"},
		{1500, "1s500ms"},
		{90000, "1m30s"},
		{3600000, "1h"},
		{172800000, "2d"},
		{129600001, "1d12h1ms"},
		{-5000, "-5s"},
		{maxDuration, "106751d23h47m16s854ms"},
	} {
		if got := tc.d.String(); got != tc.want {
			t.Errorf("Duration(%d).String() = %q, want %q", int64(tc.d), got, tc.want)
		}
		if back, err := ParseDuration(tc.want); err != nil || back != tc.d {
			t.Errorf("ParseDuration(%q) = %d, %v; want %d", tc.want, back, err, tc.d)
		}
	}
}
