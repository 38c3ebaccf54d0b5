package oracle

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Every expected result below was worked out by hand from the rules in
// doc.go, step by step; the comments keep the working so a reader can
// check it without running anything. wm is the watermark after the
// event's update.

func ev(key string, times ...int64) []Event {
	out := make([]Event, len(times))
	for i, t := range times {
		out[i] = Event{Key: key, Time: t}
	}
	return out
}

func em(step int, key string, start, end int64, version int, members ...int) Emission {
	return Emission{Step: step, Key: key, Start: start, End: end, Version: version, Members: members}
}

type runCase struct {
	name   string
	cfg    Config
	events []Event
	want   []Emission
	late   []int
}

func runCases(t *testing.T, cases []runCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, late := Run(tc.events, tc.cfg)
			if !reflect.DeepEqual(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
				t.Errorf("emissions:\n got %s\nwant %s", fmtEmissions(got), fmtEmissions(tc.want))
			}
			if !reflect.DeepEqual(late, tc.late) && (len(late) != 0 || len(tc.late) != 0) {
				t.Errorf("late: got %v, want %v", late, tc.late)
			}
		})
	}
}

func fmtEmissions(es []Emission) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "\n  step %d %q [%d, %d) v%d %v", e.Step, e.Key, e.Start, e.End, e.Version, e.Members)
	}
	return b.String()
}

func TestTumbling(t *testing.T) {
	runCases(t, []runCase{
		{
			name: "on time",
			cfg:  Config{Kind: Tumbling, Size: 10},
			// 0: wm 1, [0,10)={0}. 1: wm 5, [0,10)={0,1}.
			// 2: wm 10: fire [0,10) v1 (End 10 <= 10); purge it (10+0 <= 10);
			//    10 goes to [10,20), not [0,10). 3: wm 25: fire [10,20) v1,
			//    [20,30)={3}. end: fire [20,30) v1.
			events: ev("a", 1, 5, 10, 25),
			want: []Emission{
				em(2, "a", 0, 10, 1, 0, 1),
				em(3, "a", 10, 20, 1, 2),
				em(4, "a", 20, 30, 1, 3),
			},
		},
		{
			name: "slide equal to size",
			cfg:  Config{Kind: Tumbling, Size: 10, Slide: 10},
			// As "on time".
			events: ev("a", 1, 5, 10, 25),
			want: []Emission{
				em(2, "a", 0, 10, 1, 0, 1),
				em(3, "a", 10, 20, 1, 2),
				em(4, "a", 20, 30, 1, 3),
			},
		},
		{
			name: "out of order within the bound",
			cfg:  Config{Kind: Tumbling, Size: 10, MaxOutOfOrder: 5},
			// 0 @8: wm 3, [0,10)={0}. 1 @12: wm 7, [10,20)={1}.
			// 2 @9: wm 7, 10 > 7 so [0,10)={0,2}, not emitted. 3 @14: wm 9,
			// [10,20)={1,3}. 4 @16: wm 11: fire [0,10) v1, purge it;
			// [10,20)={1,3,4}. 5 @3: wm 11, [0,10) End 10 <= 11: late.
			// end: fire [10,20) v1.
			events: ev("a", 8, 12, 9, 14, 16, 3),
			want: []Emission{
				em(4, "a", 0, 10, 1, 0, 2),
				em(6, "a", 10, 20, 1, 1, 3, 4),
			},
			late: []int{5},
		},
		{
			name: "late within lateness",
			cfg:  Config{Kind: Tumbling, Size: 10, Lateness: 10},
			// 0 @5: wm 5, [0,10)={0}. 1 @15: wm 15: fire [0,10) v1 {0};
			// kept (20 > 15); [10,20)={1}. 2 @7: 20 > 15 so accepted, and
			// 10 <= 15 so emitted at once: v2 {0,2}. 3 @8: v3 {0,2,3}.
			// 4 @20: wm 20: fire [10,20) v1 {1}; purge [0,10) (20 <= 20);
			// [20,30)={4}. 5 @9: [0,10) is gone: late. 6 @19: [10,20)
			// (30 > 20): v2 {1,6} at once. end: fire [20,30) v1.
			events: ev("a", 5, 15, 7, 8, 20, 9, 19),
			want: []Emission{
				em(1, "a", 0, 10, 1, 0),
				em(2, "a", 0, 10, 2, 0, 2),
				em(3, "a", 0, 10, 3, 0, 2, 3),
				em(4, "a", 10, 20, 1, 1),
				em(6, "a", 10, 20, 2, 1, 6),
				em(7, "a", 20, 30, 1, 4),
			},
			late: []int{5},
		},
		{
			name: "fire order is end, key, start",
			cfg:  Config{Kind: Tumbling, Size: 10},
			// 0 b@1, 1 a@2: both in [0,10) of their key. 2 c@15: wm 15,
			// fire a then b (same End, keys ordered). 3 a@25: fire c
			// [10,20). end: a [20,30).
			events: []Event{{Key: "b", Time: 1}, {Key: "a", Time: 2}, {Key: "c", Time: 15}, {Key: "a", Time: 25}},
			want: []Emission{
				em(2, "a", 0, 10, 1, 1),
				em(2, "b", 0, 10, 1, 0),
				em(3, "c", 10, 20, 1, 2),
				em(4, "a", 20, 30, 1, 3),
			},
		},
		{
			name: "negative times",
			cfg:  Config{Kind: Tumbling, Size: 10, Lateness: 5},
			// 0 @-1: wm -1, [-10,0)={0}. 1 @-10: [-10,0) (0+5 > -1)={0,1}.
			// 2 @-11: [-20,-10), -10+5 <= -1: late. 3 @3: wm 3: fire
			// [-10,0) v1; kept (5 > 3); [0,10)={3}. 4 @-2: [-10,0) still
			// takes it, 0 <= 3 so v2 {0,1,4} at once. end: [0,10) v1.
			events: ev("a", -1, -10, -11, 3, -2),
			want: []Emission{
				em(3, "a", -10, 0, 1, 0, 1),
				em(4, "a", -10, 0, 2, 0, 1, 4),
				em(5, "a", 0, 10, 1, 3),
			},
			late: []int{2},
		},
		{
			name: "end of input fires everything in order",
			cfg:  Config{Kind: Tumbling, Size: 10, MaxOutOfOrder: 100},
			// wm stays negative; nothing fires before the end. Then by
			// (End, Key, Start): a [0,10), b [0,10), a [10,20).
			events: []Event{{Key: "a", Time: 5}, {Key: "b", Time: 3}, {Key: "a", Time: 10}},
			want: []Emission{
				em(3, "a", 0, 10, 1, 0),
				em(3, "b", 0, 10, 1, 1),
				em(3, "a", 10, 20, 1, 2),
			},
		},
		{
			name: "no events",
			cfg:  Config{Kind: Tumbling, Size: 10},
		},
		{
			name: "extremes do not overflow",
			cfg:  Config{Kind: Tumbling, Size: 1, MaxOutOfOrder: math.MaxInt64, Lateness: math.MaxInt64},
			// 0 @Min: wm held at Min; [Min, Min+1)={0}. 1 @Max-1: wm -1:
			// fire [Min, Min+1) v1; not purged (Min+1+Max = 0 > -1);
			// [Max-1, Max)={1}. end: fire it.
			events: ev("a", math.MinInt64, math.MaxInt64-1),
			want: []Emission{
				em(1, "a", math.MinInt64, math.MinInt64+1, 1, 0),
				em(2, "a", math.MaxInt64-1, math.MaxInt64, 1, 1),
			},
		},
	})
}

func TestSliding(t *testing.T) {
	runCases(t, []runCase{
		{
			name: "size not a multiple of slide",
			cfg:  Config{Kind: Sliding, Size: 10, Slide: 4},
			// Starts are multiples of 4, windows 10 long.
			// 0 @9: k from floor(-1/4)+1=0 to 2: [0,10),[4,14),[8,18) = {0}.
			// 1 @13: wm 13: fire [0,10) v1 {0}, purge it; k 1..3:
			//   [4,14)={0,1}, [8,18)={0,1}, [12,22)={1}.
			// 2 @2: k -1..0: [-4,6) and [0,10) end <= 13: late.
			// 3 @20: wm 20: fire [4,14), [8,18); purge them; k 3..5:
			//   [12,22)={1,3}, [16,26)={3}, [20,30)={3}.
			// end: fire [12,22), [16,26), [20,30).
			events: ev("a", 9, 13, 2, 20),
			want: []Emission{
				em(1, "a", 0, 10, 1, 0),
				em(3, "a", 4, 14, 1, 0, 1),
				em(3, "a", 8, 18, 1, 0, 1),
				em(4, "a", 12, 22, 1, 1, 3),
				em(4, "a", 16, 26, 1, 3),
				em(4, "a", 20, 30, 1, 3),
			},
			late: []int{2},
		},
		{
			name: "accepted by some windows only is not late",
			cfg:  Config{Kind: Sliding, Size: 10, Slide: 5},
			// 0 @20: wm 20, [15,25),[20,30)={0}. 1 @17: [10,20) ends at
			// 20 <= 20: refused; [15,25)={0,1}, not complete. end: fire.
			events: ev("a", 20, 17),
			want: []Emission{
				em(2, "a", 15, 25, 1, 0, 1),
				em(2, "a", 20, 30, 1, 0),
			},
		},
		{
			name: "late within lateness re-emits every window it joins",
			cfg:  Config{Kind: Sliding, Size: 10, Slide: 5, Lateness: 5},
			// 0 @3: [-5,5),[0,10)={0}. 1 @12: wm 12: fire [-5,5) v1 {0},
			// [0,10) v1 {0}; purge [-5,5) (10 <= 12); [5,15),[10,20)={1}.
			// 2 @6: [0,10) (15 > 12) -> v2 {0,2} at once; [5,15)={1,2}.
			// end: [5,15) v1 {1,2}, [10,20) v1 {1}.
			events: ev("a", 3, 12, 6),
			want: []Emission{
				em(1, "a", -5, 5, 1, 0),
				em(1, "a", 0, 10, 1, 0),
				em(2, "a", 0, 10, 2, 0, 2),
				em(3, "a", 5, 15, 1, 1, 2),
				em(3, "a", 10, 20, 1, 1),
			},
		},
		{
			name: "negative times",
			cfg:  Config{Kind: Sliding, Size: 10, Slide: 4},
			// 0 @-1: k floor(-11/4)+1=-2 to floor(-1/4)=-1: [-8,2),[-4,6).
			// 1 @-5: k -3..-2: [-12,-2) ends <= -1: refused; [-8,2)={0,1}.
			// end: [-8,2) v1 {0,1}, [-4,6) v1 {0}.
			events: ev("a", -1, -5),
			want: []Emission{
				em(2, "a", -8, 2, 1, 0, 1),
				em(2, "a", -4, 6, 1, 0),
			},
		},
		{
			name: "slide 0 means size",
			cfg:  Config{Kind: Sliding, Size: 10},
			// Tumbling windows: [0,10) fires at wm 10.
			events: ev("a", 1, 10),
			want: []Emission{
				em(1, "a", 0, 10, 1, 0),
				em(2, "a", 10, 20, 1, 1),
			},
		},
	})
}

func TestSession(t *testing.T) {
	runCases(t, []runCase{
		{
			name: "on time",
			cfg:  Config{Kind: Session, Gap: 5},
			// 0 @1: [1,6)={0}. 1 @3: 3 < 6 and 8 > 1: joins, [1,8).
			// 2 @10: wm 10: fire [1,8) v1; purge it; new [10,15).
			// 3 @20: fire [10,15); new [20,25). end: fire it.
			events: ev("a", 1, 3, 10, 20),
			want: []Emission{
				em(2, "a", 1, 8, 1, 0, 1),
				em(3, "a", 10, 15, 1, 2),
				em(4, "a", 20, 25, 1, 3),
			},
		},
		{
			name: "events exactly gap apart are separate",
			cfg:  Config{Kind: Session, Gap: 5, MaxOutOfOrder: 100},
			// 0 @1: [1,6). 1 @6: 6 < 6 is false: new [6,11). 2 @10:
			// joins [6,11) only (10 < 6 false for the first): [6,15).
			// end: by End, [1,6) then [6,15).
			events: ev("a", 1, 6, 10),
			want: []Emission{
				em(3, "a", 1, 6, 1, 0),
				em(3, "a", 6, 15, 1, 1, 2),
			},
		},
		{
			name: "bridging event merges two pending sessions",
			cfg:  Config{Kind: Session, Gap: 5, MaxOutOfOrder: 10},
			// 0 @0: wm -10, [0,5). 1 @8: wm -2, 8 < 5 false: new [8,13).
			// 2 @4: touches both (4 < 5, 9 > 0; 4 < 13, 9 > 8): one
			// session [0,13), version count 0. end: v1 {0,1,2}.
			events: ev("a", 0, 8, 4),
			want: []Emission{
				em(3, "a", 0, 13, 1, 0, 1, 2),
			},
		},
		{
			name: "late event extends an emitted session",
			cfg:  Config{Kind: Session, Gap: 5, Lateness: 10},
			// 0 @0: [0,5). 1 @2: [0,7). 2 @12: wm 12: fire [0,7) v1;
			// kept (17 > 12); 12 < 7 false: new [12,17) pending.
			// 3 @5: touches [0,7) only (10 > 12 false): [0,10), count 1,
			// 10 <= 12: v2 {0,1,3} at once. 4 @8: touches [0,10) and
			// [12,17) (13 > 12): [0,17), count max(2,0)=2, 17 > 12:
			// pending. 5 @30: wm 30: fire [0,17) v3; purge it (27 <= 30);
			// new [30,35). 6 @14: touches nothing live, 14+5+10 = 29 <= 30:
			// late. end: [30,35) v1.
			events: ev("a", 0, 2, 12, 5, 8, 30, 14),
			want: []Emission{
				em(2, "a", 0, 7, 1, 0, 1),
				em(3, "a", 0, 10, 2, 0, 1, 3),
				em(5, "a", 0, 17, 3, 0, 1, 2, 3, 4),
				em(7, "a", 30, 35, 1, 5),
			},
			late: []int{6},
		},
		{
			name: "late new session within lateness is emitted at once",
			cfg:  Config{Kind: Session, Gap: 5, Lateness: 10},
			// 0 @20: wm 20, [20,25). 1 @10: 15 > 20 false, touches
			// nothing; 10+5+10 = 25 > 20: accepted, [10,15) ends <= 20:
			// v1 at once. end: [20,25) v1.
			events: ev("a", 20, 10),
			want: []Emission{
				em(1, "a", 10, 15, 1, 1),
				em(2, "a", 20, 25, 1, 0),
			},
		},
		{
			name: "bridging a purged session does not resurrect it",
			cfg:  Config{Kind: Session, Gap: 10},
			// 0 @0: [0,10). 1 @15: wm 15: fire [0,10) v1; purge it
			// (10 <= 15); new [15,25). 2 @8: would touch [0,10) (8 < 10)
			// but it is gone; touches [15,25) (18 > 15): [8,25) count 0,
			// pending. end: v1 {1,2}, without event 0.
			events: ev("a", 0, 15, 8),
			want: []Emission{
				em(1, "a", 0, 10, 1, 0),
				em(3, "a", 8, 25, 1, 1, 2),
			},
		},
		{
			name: "keys are separate, fire order is end first",
			cfg:  Config{Kind: Session, Gap: 5},
			// 0 b@0: [0,5). 1 a@1: its own key: [1,6). 2 a@20: wm 20:
			// fire b [0,5) then a [1,6) (End before Key); new a [20,25).
			events: []Event{{Key: "b", Time: 0}, {Key: "a", Time: 1}, {Key: "a", Time: 20}},
			want: []Emission{
				em(2, "b", 0, 5, 1, 0),
				em(2, "a", 1, 6, 1, 1),
				em(3, "a", 20, 25, 1, 2),
			},
		},
		{
			name: "extremes do not overflow",
			cfg:  Config{Kind: Session, Gap: math.MaxInt64, MaxOutOfOrder: math.MaxInt64},
			// 0 @Min: wm Min, [Min, -1). 1 @-2: wm held at Min; touches it
			// (-2 < -1); -2 - Min = Max-1 < Gap: one session [Min, Max-2).
			events: ev("a", math.MinInt64, -2),
			want: []Emission{
				em(2, "a", math.MinInt64, math.MaxInt64-2, 1, 0, 1),
			},
		},
		{
			name: "extreme gap with purge",
			cfg:  Config{Kind: Session, Gap: math.MaxInt64},
			// 0 @Min: [Min, -1). 1 @-1: wm -1: fire it, purge it
			// (-1 <= -1); touches nothing live, -1+Gap > -1: new
			// [-1, Max-1).
			events: ev("a", math.MinInt64, -1),
			want: []Emission{
				em(1, "a", math.MinInt64, -1, 1, 0),
				em(2, "a", -1, math.MaxInt64-1, 1, 1),
			},
		},
	})
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		problems []string // substrings, one per reported problem; none means valid
	}{
		{"tumbling", Config{Kind: Tumbling, Size: 10}, nil},
		{"tumbling slide=size", Config{Kind: Tumbling, Size: 10, Slide: 10}, nil},
		{"sliding", Config{Kind: Sliding, Size: 10, Slide: 3}, nil},
		{"session", Config{Kind: Session, Gap: 1}, nil},
		{"session ignores size", Config{Kind: Session, Gap: 1, Size: -1, Slide: -1}, nil},
		{"zero size", Config{Kind: Tumbling}, []string{"Size must be > 0"}},
		{"tumbling slide", Config{Kind: Tumbling, Size: 10, Slide: 5}, []string{"Slide must be 0 or Size"}},
		{"slide > size", Config{Kind: Sliding, Size: 10, Slide: 11}, []string{"longer than Size"}},
		{"negative slide", Config{Kind: Sliding, Size: 10, Slide: -1}, []string{"Slide must be >= 0"}},
		{"no gap", Config{Kind: Session}, []string{"Gap must be > 0"}},
		{"unknown kind", Config{Kind: 7, Size: 1}, []string{"unknown Kind 7"}},
		{
			"every problem at once",
			Config{Kind: Sliding, Size: -1, Slide: -2, MaxOutOfOrder: -3, Lateness: -4},
			[]string{"Size must be > 0", "Slide must be >= 0", "MaxOutOfOrder", "Lateness"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.problems) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.problems) {
				t.Errorf("got %d problems, want %d:\n%v", len(lines), len(tc.problems), err)
			}
			for _, p := range tc.problems {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("error %q does not mention %q", err, p)
				}
			}
		})
	}
}

func TestRunPanics(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		events []Event
		want   string
	}{
		{"invalid config", Config{Kind: Session}, nil, "Gap must be > 0"},
		{"aligned end overflows", Config{Kind: Tumbling, Size: 10}, ev("a", 0, math.MaxInt64), "event 1 at 9223372036854775807"},
		{"aligned start underflows", Config{Kind: Sliding, Size: 10, Slide: 3}, ev("a", math.MinInt64), "does not fit in int64"},
		{"session end overflows", Config{Kind: Session, Gap: 5}, ev("a", math.MaxInt64-4), "event 0 at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("Run did not panic")
				}
				if msg := fmt.Sprint(r); !strings.Contains(msg, tc.want) {
					t.Fatalf("panic %q does not mention %q", msg, tc.want)
				}
			}()
			Run(tc.events, tc.cfg)
		})
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Tumbling: "tumbling", Sliding: "sliding", Session: "session", 9: "Kind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

// TestAdvance: an advance event moves the watermark without a record:
// windows it passes fire at its step, and a record behind it is late.
func TestAdvance(t *testing.T) {
	events := []Event{{Key: "a", Time: 5}, {Time: 10, Advance: true}, {Key: "a", Time: 7}, {Key: "a", Time: 12}}
	ems, late := Run(events, Config{Kind: Tumbling, Size: 10, Slide: 10})
	want := []Emission{em(1, "a", 0, 10, 1, 0), em(4, "a", 10, 20, 1, 3)}
	if !slices.EqualFunc(ems, want, func(a, b Emission) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
		t.Fatalf("emissions %v, want %v", ems, want)
	}
	if !slices.Equal(late, []int{2}) {
		t.Fatalf("late %v, want [2]", late)
	}
}
