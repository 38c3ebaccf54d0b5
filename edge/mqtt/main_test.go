package mqtt

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if crashChild() {
		return
	}
	goleak.VerifyTestMain(m)
}
