package archive

import (
	"bytes"
	"testing"
)

// FuzzState: decodeState never panics, and a state it accepts encodes to
// one it decodes the same.
func FuzzState(f *testing.F) {
	st := &state{Format: stateFormat, LogID: "0123456789abcdef", Cursor: 4, Partitions: map[string]*partState{
		"pipeline=a/date=2026-03-01/hour=01": {Gen: 2, Files: []File{{Path: "x", Rows: 1}}}},
		Intent: &intent{Cause: causeAppend, From: 5, To: 9, RowsPerFile: 10}}
	f.Add(st.encode())
	f.Add([]byte(`{"format":1,"log":"0123456789abcdef","intent":{"cause":"compact","partition":"nope"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeState(b)
		if err != nil {
			return
		}
		s2, err := decodeState(s.encode())
		if err != nil {
			t.Fatalf("a decoded state does not decode again: %v", err)
		}
		if !bytes.Equal(s.encode(), s2.encode()) {
			t.Fatal("a state changes through encode and decode")
		}
	})
}
