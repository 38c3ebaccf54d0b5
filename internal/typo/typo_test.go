package typo

import "testing"

func TestSuggest(t *testing.T) {
	opts := []string{"filter", "window", "qos", "interval", "level"}
	for _, tc := range []struct{ in, want string }{
		{"filtr", "filter"}, {"Window", "window"}, {"qso", "qos"}, {"intervl", "interval"},
		{"LEVEL", "level"}, {"foo", ""}, {"", ""}, {"windowsss", ""},
	} {
		if got := Suggest(tc.in, opts); got != tc.want {
			t.Errorf("Suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
