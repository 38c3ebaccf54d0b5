package operators_test

import (
	"time"

	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
