package testproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes the kernel kill cmd's process when the test process
// dies without running its cleanups (a panic, a -timeout), instead of
// leaving an orphan (a broker, a node) behind.
func DieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
