// Package linediff renders the difference of two small texts, line by
// line, as a unified diff (the format of diff -u and git diff). runnelctl
// uses it for what the hub does not diff itself: deployment specs; its
// fake hub, for pipeline revisions.
//
// The edit script is a longest common subsequence of lines, which is
// quadratic: texts whose line counts multiply past MaxCells are shown as
// one hunk that removes every old line and adds every new one, rather
// than taking seconds.
package linediff
