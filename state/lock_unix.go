//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package state

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// lockFile takes an exclusive flock on f, retrying until timeout (forever if
// negative). bbolt takes the same lock again on the same file description
// when Open hands it f, which succeeds; holding it first means no other
// process writes the file while Open verifies it.
func lockFile(f *os.File, timeout time.Duration) error {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return err
		}
		if timeout >= 0 && time.Now().After(deadline) {
			return ErrLocked
		}
		time.Sleep(50 * time.Millisecond)
	}
}
