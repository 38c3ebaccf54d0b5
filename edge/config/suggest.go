package config

import (
	"fmt"
	"strings"
)

// suggest returns the option closest to word when it is close enough to be
// a likely typo ("intervl" -> "interval", "Level" -> "level"), else "".
//
// It is operators/spec's suggest, which is unexported there; when a third
// user appears it should earn a small package of its own.
func suggest(word string, options []string) string {
	best, bestD := "", -1
	for _, o := range options {
		if strings.EqualFold(word, o) {
			return o
		}
		d := editDistance(strings.ToLower(word), strings.ToLower(o))
		if bestD < 0 || d < bestD {
			best, bestD = o, d
		}
	}
	// One edit per three letters, at most two: "intervl" -> "interval",
	// but "foo" suggests nothing.
	limit := min(2, max(1, len(word)/3))
	if bestD >= 0 && bestD <= limit {
		return best
	}
	return ""
}

// suggestValue is suggest for the values of an enum, which are also
// often written longer or shorter than they are: "warning" -> "warn".
func suggestValue(word string, options []string) string {
	if s := suggest(word, options); s != "" {
		return s
	}
	lw := strings.ToLower(word)
	for _, o := range options {
		if len(lw) >= 3 && len(o) >= 3 && (strings.HasPrefix(lw, o) || strings.HasPrefix(o, lw)) {
			return o
		}
	}
	return ""
}

// didYouMean formats suggest's answer as a message part.
func didYouMean(word string, options []string) string {
	if s := suggest(word, options); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent letters each cost
// one. Setting names are short, so the quadratic table is fine.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 64 || len(rb) > 64 {
		return max(len(ra), len(rb)) // not a typo of a setting name
	}
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
