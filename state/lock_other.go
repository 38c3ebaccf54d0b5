//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package state

import (
	"os"
	"time"
)

// lockFile is a no-op where flock is not available: bbolt takes its own lock
// in bbolt.Open, after verification.
func lockFile(*os.File, time.Duration) error { return nil }

// InUse reports whether another process holds the state file at path.
// Without flock it cannot tell, and says no.
func InUse(string) (bool, error) { return false, nil }
