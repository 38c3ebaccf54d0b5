//go:build !linux

package testproc

import "os/exec"

// DieWithParent has no portable equivalent outside Linux.
func DieWithParent(*exec.Cmd) {}
