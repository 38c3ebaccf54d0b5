package linediff

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestUnified(t *testing.T) {
	for _, tc := range []struct{ name, a, b, want string }{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{"one line changed", "a\nb\nc\n", "a\nB\nc\n", "--- x\n+++ y\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"from nothing", "", "a\n", "--- x\n+++ y\n@@ -0,0 +1 @@\n+a\n"},
		{"far apart changes are two hunks",
			"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "0\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n13\n",
			"--- x\n+++ y\n@@ -1,4 +1,4 @@\n-1\n+0\n 2\n 3\n 4\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+13\n"},
		{"near changes are one hunk", "1\n2\n3\n4\n5\n", "0\n2\n3\n4\n6\n",
			"--- x\n+++ y\n@@ -1,5 +1,5 @@\n-1\n+0\n 2\n 3\n 4\n-5\n+6\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unified("x", "y", tc.a, tc.b); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestLarge: past MaxCells the diff is one replacing hunk, quickly.
func TestLarge(t *testing.T) {
	a := strings.Repeat("a\n", 3000)
	b := strings.Repeat("b\n", 3000)
	got := Unified("x", "y", a, b)
	if strings.Count(got, "\n-a") != 3000 || strings.Count(got, "\n+b") != 3000 || strings.Count(got, "\n@@ ") != 1 {
		t.Errorf("unexpected diff of %d bytes", len(got))
	}
}
