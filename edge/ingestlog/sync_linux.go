package ingestlog

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes f's data durable with fdatasync: the log reads back
// nothing of a file's metadata but its length, which fdatasync covers, so
// the time stamps need not be written at every commit.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
