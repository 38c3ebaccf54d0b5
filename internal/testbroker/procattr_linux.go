package testbroker

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the broker when the test process dies
// without running its cleanups (a panic, a -timeout), instead of leaving an
// orphaned mosquitto behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
