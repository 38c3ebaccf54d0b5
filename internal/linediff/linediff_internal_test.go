package linediff

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// applyUnified applies a unified diff to a, the way patch does, checking
// that context and removed lines match.
func applyUnified(t *testing.T, a, diff string) string {
	t.Helper()
	src := splitLines(a)
	lines := strings.SplitAfter(diff, "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "--- ") || !strings.HasPrefix(lines[1], "+++ ") {
		t.Fatalf("no header in %q", diff)
	}
	var out []string
	at := 0 // next line of src
	for i := 2; i < len(lines) && lines[i] != ""; {
		h := lines[i]
		var as, al, bs, bl int
		if !parseHunk(h, &as, &al, &bs, &bl) {
			t.Fatalf("bad hunk header %q", h)
		}
		start := as - 1
		if al == 0 {
			start = as
		}
		if start < at {
			t.Fatalf("hunk %q overlaps the one before", h)
		}
		out = append(out, src[at:start]...)
		at = start
		i++
		for i < len(lines) && lines[i] != "" && lines[i][0] != '@' {
			l := lines[i]
			body := l[1:]
			if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "\\ No newline") {
				body = strings.TrimSuffix(body, "\n")
				i++
			}
			switch l[0] {
			case ' ', '-':
				if at >= len(src) || src[at] != body {
					t.Fatalf("line %d of a is %q, the diff says %q", at+1, src[min(at, len(src)-1)], body)
				}
				if l[0] == ' ' {
					out = append(out, body)
				}
				at++
			case '+':
				out = append(out, body)
			default:
				t.Fatalf("bad diff line %q", l)
			}
			i++
		}
	}
	out = append(out, src[at:]...)
	return strings.Join(out, "")
}

func parseHunk(h string, as, al, bs, bl *int) bool {
	var a, b string
	if _, err := fmt.Sscanf(h, "@@ -%s +%s @@\n", &a, &b); err != nil {
		return false
	}
	parse := func(s string, start, n *int) bool {
		x, y, ok := strings.Cut(s, ",")
		var err error
		if *start, err = strconv.Atoi(x); err != nil {
			return false
		}
		*n = 1
		if ok {
			*n, err = strconv.Atoi(y)
		}
		return err == nil
	}
	return parse(a, as, al) && parse(b, bs, bl)
}

func TestUnifiedDiffApplies(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	words := []string{"a", "b", "c", "d", "e"}
	text := func() string {
		var b strings.Builder
		for range r.IntN(30) {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte('\n')
		}
		if r.IntN(4) == 0 {
			b.WriteString("tail")
		}
		return b.String()
	}
	for i := range 3000 {
		a, b := text(), text()
		if i%3 == 0 { // mostly alike, as successive specs are
			ls := splitLines(a)
			if len(ls) > 0 {
				k := r.IntN(len(ls))
				ls[k] = "changed\n"
			}
			b = strings.Join(ls, "")
		}
		d := Unified("a", "b", a, b)
		if (d == "") != (a == b) {
			t.Fatalf("diff of %q and %q is %q", a, b, d)
		}
		if d == "" {
			continue
		}
		if got := applyUnified(t, a, d); got != b {
			t.Fatalf("diff of\n%q\nand\n%q:\n%s\napplies to\n%q", a, b, d, got)
		}
	}
}

func TestUnifiedDiffHunks(t *testing.T) {
	var a, b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&a, "%d\n", i)
		switch i {
		case 2:
			b.WriteString("two\n")
		case 15:
		default:
			fmt.Fprintf(&b, "%d\n", i)
		}
	}
	want := `--- a
+++ b
@@ -1,6 +1,6 @@
 0
 1
-2
+two
 3
 4
 5
@@ -13,7 +13,6 @@
 12
 13
 14
-15
 16
 17
 18
`
	if got := Unified("a", "b", a.String(), b.String()); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	// No newline at the end.
	if got, want := Unified("a", "b", "x\ny", "x\ny\n"), "--- a\n+++ b\n@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+y\n"; got != want {
		t.Errorf("got:\n%q\nwant:\n%q", got, want)
	}
}

func TestUnifiedDiffLarge(t *testing.T) {
	// Past maxLCSCells the middle is replaced whole: still a correct diff.
	var a, b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&a, "a%d\n", i)
		fmt.Fprintf(&b, "b%d\n", i)
	}
	d := Unified("a", "b", a.String(), b.String())
	if got := applyUnified(t, a.String(), d); got != b.String() {
		t.Fatal("the large diff does not apply")
	}
}
