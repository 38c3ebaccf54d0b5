package window

import (
	"testing"
	"unsafe"
)

// The per-key memory docs/design.md states (64-bit platforms); a field added to keyState
// should be a decision, not an accident.
func TestKeyStateSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes stated for 64-bit platforms")
	}
	if n := unsafe.Sizeof(keyState{}); n != 24 {
		t.Errorf("keyState is %d bytes, docs/design.md says 24", n)
	}
	if n := unsafe.Sizeof(keyName{}); n != 32 {
		t.Errorf("keyName is %d bytes, docs/design.md says 32", n)
	}
}
