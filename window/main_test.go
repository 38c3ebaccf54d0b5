package window_test

import "time"

var testEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
