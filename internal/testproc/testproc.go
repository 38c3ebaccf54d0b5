// Package testproc runs the project's binaries as real processes in tests:
// build them, start them with their log captured, wait for a log line,
// kill them with SIGKILL.
package testproc

import (
	"bytes"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer safe for a process's writes and the test's
// reads at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Build builds the packages (paths relative to the test's directory) into
// dir, one binary each, named after the package.
func Build(t testing.TB, dir string, pkgs ...string) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %v: %v\n%s", pkgs, err, out)
	}
}

// Proc is a restartable process: Args[0] is the binary.
type Proc struct {
	Name string
	Args []string
	Cmd  *exec.Cmd
	Logs *Buffer // the current run's stderr
}

// Start starts a new run. The process dies with the test binary.
func (p *Proc) Start(t testing.TB) {
	t.Helper()
	p.Logs = &Buffer{}
	p.Cmd = exec.Command(p.Args[0], p.Args[1:]...)
	p.Cmd.Stderr = p.Logs
	DieWithParent(p.Cmd)
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("%s: %v", p.Name, err)
	}
}

// Kill kills the run with SIGKILL and waits for it.
func (p *Proc) Kill() {
	p.Cmd.Process.Signal(syscall.SIGKILL)
	p.Cmd.Wait()
}

// WaitLog waits up to 15 s for s to appear in the run's log.
func (p *Proc) WaitLog(t testing.TB, s string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(p.Logs.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q in its log:\n%s", p.Name, s, p.Logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
