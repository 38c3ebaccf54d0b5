package buildinfo_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/internal/buildinfo"
)

// TestStampedBinaries builds the three binaries the way `make release`
// stamps them (-ldflags -X) and checks what --version prints: the
// stamped version, commit and time, the Go version and the platform.
func TestStampedBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three binaries")
	}
	dir := t.TempDir()
	const pkg = "github.com/runnel-io/runnel/internal/buildinfo"
	ldflags := "-X " + pkg + ".version=v9.8.7-1-gabcdef0-dirty -X " + pkg + ".commit=abcdef0123 -X " + pkg + ".built=2026-03-04T05:06:07Z"
	cmds := []string{"runnel-edge", "runnel-hub", "runnelctl"}
	args := []string{"build", "-trimpath", "-ldflags", ldflags, "-o", dir + "/"}
	for _, c := range cmds {
		args = append(args, "../../cmd/"+c)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, c := range cmds {
		out, err := exec.Command(filepath.Join(dir, c), "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v\n%s", c, err, out)
		}
		want := c + " v9.8.7-1-gabcdef0-dirty\n  commit:   abcdef0123\n  built:    2026-03-04T05:06:07Z\n  go:       " +
			runtime.Version() + "\n  platform: " + runtime.GOOS + "/" + runtime.GOARCH
		if !strings.HasPrefix(string(out), want) {
			t.Errorf("%s --version:\n%s\nwant\n%s", c, out, want)
		}
	}
}

// TestUnstamped: a test binary is not stamped; its version is the
// toolchain's or "devel", never empty.
func TestUnstamped(t *testing.T) {
	in := buildinfo.Get()
	if in.Version == "" || in.Go != runtime.Version() || buildinfo.Version() != in.Version {
		t.Errorf("%+v", in)
	}
}
