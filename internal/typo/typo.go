// Package typo suggests the option a mistyped word most likely meant, for
// "did you mean" hints in configuration and spec errors.
package typo

import "strings"

// Suggest returns the option closest to word when it is close enough to be a
// likely typo ("filtr" -> "filter", "Window" -> "window"), else "". Case is
// ignored; the allowance is one edit per three letters, at most two, so
// "qso" suggests "qos" (a transposition) but "foo" suggests nothing.
func Suggest(word string, options []string) string {
	best, bestD := "", -1
	for _, o := range options {
		if strings.EqualFold(word, o) {
			return o
		}
		d := distance(strings.ToLower(word), strings.ToLower(o))
		if bestD < 0 || d < bestD {
			best, bestD = o, d
		}
	}
	limit := min(2, max(1, len(word)/3))
	if bestD >= 0 && bestD <= limit {
		return best
	}
	return ""
}

// distance is the optimal string alignment distance: insertions, deletions,
// substitutions and transpositions of adjacent letters each cost one. Names
// are short, so the quadratic table is fine; long words are never typos of
// one.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 64 || len(rb) > 64 {
		return max(len(ra), len(rb))
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
