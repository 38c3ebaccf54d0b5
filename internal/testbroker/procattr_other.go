//go:build !linux

package testbroker

import "os/exec"

// dieWithParent has no portable equivalent outside Linux.
func dieWithParent(*exec.Cmd) {}
