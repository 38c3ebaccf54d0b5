// Package linediff makes unified diffs (diff -u, 3 lines of context) of
// texts such as pipeline specs: the hub's fleet API serves them and
// runnelctl shows them.
package linediff

import (
	"fmt"
	"strings"
)

// A unified diff of two spec texts (diff -u, 3 lines of context), from a
// longest common subsequence of lines. Specs are small; past maxLCSCells
// the part between the common head and tail is shown as removed and
// added whole, which is still a correct diff, only not a minimal one.

const (
	diffContext = 3
	maxLCSCells = 1 << 20
)

type diffOp struct {
	kind byte // ' ', '-', '+'
	line string
}

// splitLines splits s into lines that keep their "\n"; the last one lacks
// it when s does not end with a newline.
func splitLines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

func diffLines(a, b []string) []diffOp {
	var ops []diffOp
	// Common head and tail first: most changes of a spec are local.
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	for _, l := range a[:head] {
		ops = append(ops, diffOp{' ', l})
	}
	am, bm := a[head:len(a)-tail], b[head:len(b)-tail]
	n, m := len(am), len(bm)
	if (n+1)*(m+1) > maxLCSCells {
		for _, l := range am {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range bm {
			ops = append(ops, diffOp{'+', l})
		}
	} else {
		// lcs[i*(m+1)+j]: the LCS length of am[i:] and bm[j:].
		lcs := make([]int32, (n+1)*(m+1))
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if am[i] == bm[j] {
					lcs[i*(m+1)+j] = lcs[(i+1)*(m+1)+j+1] + 1
				} else {
					lcs[i*(m+1)+j] = max(lcs[(i+1)*(m+1)+j], lcs[i*(m+1)+j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && am[i] == bm[j]:
				ops = append(ops, diffOp{' ', am[i]})
				i++
				j++
			case i < n && (j == m || lcs[(i+1)*(m+1)+j] >= lcs[i*(m+1)+j+1]):
				// Removals first, as diff -u writes a replaced line.
				ops = append(ops, diffOp{'-', am[i]})
				i++
			default:
				ops = append(ops, diffOp{'+', bm[j]})
				j++
			}
		}
	}
	for _, l := range a[len(a)-tail:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

// Unified returns the unified diff from a (named aName) to b (bName), ""
// when they are equal.
func Unified(aName, bName, a, b string) string {
	if a == b {
		return ""
	}
	ops := diffLines(splitLines(a), splitLines(b))
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", aName, bName)
	// aAt[k], bAt[k]: lines of a and b before ops[k].
	aAt := make([]int, len(ops)+1)
	bAt := make([]int, len(ops)+1)
	for k, op := range ops {
		aAt[k+1], bAt[k+1] = aAt[k], bAt[k]
		if op.kind != '+' {
			aAt[k+1]++
		}
		if op.kind != '-' {
			bAt[k+1]++
		}
	}
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			k++
			continue
		}
		// A hunk: from diffContext lines before this change to
		// diffContext lines after the last change that is at most
		// 2*diffContext equal lines from the one before it.
		start := max(0, k-diffContext)
		end := k
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*diffContext {
				end = min(len(ops), end+diffContext)
				break
			}
			end = run
		}
		aLen, bLen := aAt[end]-aAt[start], bAt[end]-bAt[start]
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(aAt[start], aLen), hunkRange(bAt[start], bLen))
		for _, op := range ops[start:end] {
			out.WriteByte(op.kind)
			out.WriteString(op.line)
			if !strings.HasSuffix(op.line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		k = end
	}
	return out.String()
}

// hunkRange renders "start,len" as diff -u does: 1-based, and the line
// before an empty range.
func hunkRange(before, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", before)
	}
	if n == 1 {
		return fmt.Sprintf("%d", before+1)
	}
	return fmt.Sprintf("%d,%d", before+1, n)
}
