//go:build race

package archive_test

// raceEnabled: the race detector slows the crash test down several
// times, so it visits fewer crash points under it.
const raceEnabled = true
