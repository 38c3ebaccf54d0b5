package state_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if compactChild() {
		return
	}
	goleak.VerifyTestMain(m)
}
