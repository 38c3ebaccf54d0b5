package mqtt

import (
	"errors"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		filter, topic string
		want          bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a/b", "a/b/c", false},
		{"a/b/c", "a/b", false},
		{"a/+", "a/b", true},
		{"a/+", "a/", true}, // '+' matches an empty level
		{"a/+", "a", false},
		{"a/+", "a/b/c", false},
		{"+/+", "/x", true},
		{"+", "/x", false},
		{"a/#", "a", true}, // '#' includes the parent level
		{"a/#", "a/b/c", true},
		{"a/#", "ab", false},
		{"#", "a/b", true},
		{"#", "/", true},
		{"+/#", "a", true},
		{"sport/tennis/+", "sport/tennis/player1", true},
		{"sport/+/player1", "sport/tennis/player1", true},
		{"#", "$SYS/uptime", false}, // MQTT-4.7.2-1
		{"+/uptime", "$SYS/uptime", false},
		{"$SYS/#", "$SYS/uptime", true},
		{"$share/g/a/+", "a/b", true},
		{"$share/g/#", "x/y", true},
		{"$share/g/a", "b", false},
	}
	for _, tt := range tests {
		if got := Match(tt.filter, tt.topic); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.filter, tt.topic, got, tt.want)
		}
		if ValidateFilter(tt.filter) != nil {
			t.Errorf("test filter %q is not valid", tt.filter)
		}
	}
}

func TestValidateFilter(t *testing.T) {
	tests := []struct {
		filter string
		want   string // "" for valid, else a fragment of the error
	}{
		{"a/b", ""},
		{"/", ""},
		{"a/", ""},
		{"+", ""},
		{"#", ""},
		{"a/+/c/#", ""},
		{"$share/g/a/#", ""},
		{"", "empty"},
		{"a/#/c", "'#' must be the whole last level (level 1"},
		{"a#", "'#' must be the whole last level (level 0"},
		{"#/", "'#' must be the whole last level"},
		{"a/b+", "'+' must be a whole level (level 1"},
		{"a\x00b", "NUL at byte 1"},
		{"a\xffb", "not valid UTF-8"},
		{strings.Repeat("a", 65536), "65536 bytes"},
		{"$share/g", "want $share/{group}/{filter}"},
		{"$share//a", "group \"\""},
		{"$share/g+/a", "group \"g+\""},
		{"$share/g/a#", "'#' must be the whole last level"},
	}
	for _, tt := range tests {
		err := ValidateFilter(tt.filter)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("ValidateFilter(%.40q) = %v, want nil", tt.filter, err)
		case tt.want != "" && err == nil:
			t.Errorf("ValidateFilter(%.40q) = nil, want an error with %q", tt.filter, tt.want)
		case tt.want != "" && (!strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidTopic)):
			t.Errorf("ValidateFilter(%.40q) = %v, want ErrInvalidTopic with %q", tt.filter, err, tt.want)
		}
	}
}

func TestValidateTopic(t *testing.T) {
	for topic, ok := range map[string]bool{"a/b": true, "/": true, "$SYS/x": true, "": false, "a/+": false, "a/#": false, "a\x00": false} {
		if err := ValidateTopic(topic); (err == nil) != ok {
			t.Errorf("ValidateTopic(%q) = %v, want ok=%v", topic, err, ok)
		}
	}
}

// matchOracle is MQTT matching written the obvious way: split both into
// levels and compare, with '#' consuming the rest.
func matchOracle(filter, topic string) bool {
	if strings.HasPrefix(filter, sharePrefix) {
		parts := strings.SplitN(filter, "/", 3)
		if len(parts) == 3 {
			filter = parts[2]
		}
	}
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	f, tp := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, fl := range f {
		if fl == "#" && i == len(f)-1 {
			return true
		}
		if i >= len(tp) || (fl != "+" && fl != tp[i]) {
			return false
		}
	}
	return len(f) == len(tp)
}

// FuzzMatch checks Match against the oracle for valid filters and topics,
// and that neither function panics on anything.
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{{"a/#", "a"}, {"+/+", "/x"}, {"#", "$SYS/x"}, {"$share/g/a/+", "a/b"}, {"a/+/c", "a//c"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, filter, topic string) {
		got := Match(filter, topic)
		if ValidateFilter(filter) != nil || ValidateTopic(topic) != nil {
			return
		}
		if want := matchOracle(filter, topic); got != want {
			t.Fatalf("Match(%q, %q) = %v, oracle says %v", filter, topic, got, want)
		}
	})
}

// FuzzValidateFilter: a filter that passes has wildcards only where MQTT
// allows them, so every level is literal, "+", or a final "#".
func FuzzValidateFilter(f *testing.F) {
	for _, s := range []string{"a/b", "a/#", "+/x", "$share/g/#", "a#", "#/", "$share//x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, filter string) {
		if ValidateFilter(filter) != nil {
			return
		}
		inner := filter
		if rest, ok := strings.CutPrefix(filter, sharePrefix); ok {
			_, inner, _ = strings.Cut(rest, "/")
		}
		levels := strings.Split(inner, "/")
		for i, l := range levels {
			if strings.ContainsAny(l, "+#") && l != "+" && !(l == "#" && i == len(levels)-1) {
				t.Fatalf("ValidateFilter accepted %q with level %d = %q", filter, i, l)
			}
		}
	})
}

func BenchmarkMatch(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if !Match("plant/+/line/+/temp/#", "plant/7/line/3/temp/sensor/42") {
			b.Fatal("no match")
		}
	}
}
