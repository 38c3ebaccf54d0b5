//go:build !linux

package pageout

import "errors"

// Executable is not implemented here: the pages stay until the system
// reclaims them.
func Executable() (int64, error) {
	return 0, errors.ErrUnsupported
}
