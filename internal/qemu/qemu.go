package qemu

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/internal/tests3"
)

// Arch is a target runnel ships to.
type Arch struct {
	Name     string // arm64, armv7: the dist/linux-<Name> directory of make release
	GOARCH   string
	GOARM    string // "" but for 32-bit ARM
	Emulator string // the qemu-user-static binary that runs it
}

// Arches are the ARM targets of `make release`.
var Arches = []Arch{
	{Name: "arm64", GOARCH: "arm64", Emulator: "qemu-aarch64-static"},
	{Name: "armv7", GOARCH: "arm", GOARM: "7", Emulator: "qemu-arm-static"},
}

// Version is the version Build stamps (-ldflags -X), which --version and
// /healthz of the built binary must report.
const Version = "v0.0.0-qemu-test"

// Need returns the emulator's path, skipping t when it is missing —
// failing it instead when RUNNEL_REQUIRE_SERVERS is set.
func (a Arch) Need(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath(a.Emulator)
	if err == nil {
		return path
	}
	if tests3.Required() {
		t.Fatalf("qemu: %s not found (%v); run deploy/test/install-deps.sh (RUNNEL_REQUIRE_SERVERS is set, so this fails instead of skipping)", a.Emulator, err)
	}
	t.Skipf("qemu: %s not found (%v); run deploy/test/install-deps.sh (set RUNNEL_REQUIRE_SERVERS=1 to fail instead of skipping)", a.Emulator, err)
	return ""
}

// Build cross-compiles pkg (a path relative to the test's directory) for
// a into dir and returns the binary's path: static, -trimpath, stripped,
// with Version stamped, as `make release` builds it.
func Build(t testing.TB, a Arch, dir, pkg string) string {
	t.Helper()
	const bi = "github.com/runnel-io/runnel/internal/buildinfo"
	bin := filepath.Join(dir, filepath.Base(pkg)+"-"+a.Name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X "+bi+".version="+Version+" -X "+bi+".commit=qemu", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+a.GOARCH, "GOARM="+a.GOARM)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("qemu: build %s for %s: %v\n%s", pkg, a.Name, err, out)
	}
	return bin
}

// Command returns the command that runs bin with args under emulator;
// the process dies with the test binary (testproc.DieWithParent).
func Command(emulator, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(emulator, append([]string{bin}, args...)...)
	testproc.DieWithParent(cmd)
	return cmd
}
