// Package buildinfo is what runnel's binaries (runnel-edge, runnel-hub,
// runnelctl) say about themselves: their version, the commit they were
// built from, when, and with which Go for which OS and architecture. It
// is printed by --version, reported in the health answers (/healthz of
// both, the hub's /v1/health), sent to the hub when an edge registers
// and written into snapshot manifests.
//
// # Where the values come from
//
// A release build (`make release`) stamps them at link time:
//
//	go build -ldflags "-X github.com/runnel-io/runnel/internal/buildinfo.version=v0.4.0-3-g1a2b3c4-dirty \
//	  -X github.com/runnel-io/runnel/internal/buildinfo.commit=1a2b3c4... \
//	  -X github.com/runnel-io/runnel/internal/buildinfo.built=2026-01-02T03:04:05Z"
//
// with the version from `git describe --tags --always --dirty`. A binary
// built without them (`go build`, `go install`, `go run`, a test) falls
// back to what the Go toolchain recorded (runtime/debug.ReadBuildInfo):
// the module version (`go install ...@v0.4.0` gives v0.4.0; a build in a
// git checkout gives a pseudo-version with +dirty when the tree had
// changes), and the vcs.revision and vcs.time settings. With neither the
// version is "devel".
//
// # Caveats
//
//   - The values are read once per process; they cannot change at run
//     time.
//   - -trimpath does not drop the toolchain's VCS settings, but building
//     outside a git checkout (or with -buildvcs=false) does: such a
//     binary has no commit unless the link stamped one.
package buildinfo
