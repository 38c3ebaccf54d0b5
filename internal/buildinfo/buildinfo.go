package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// Stamped at link time by `make release` (-ldflags -X, see the package
// comment); empty in other builds.
var (
	version string
	commit  string
	built   string
)

// Info is a binary's build information.
type Info struct {
	// Version is `git describe --tags --always --dirty` of a release
	// build, else the module version the toolchain recorded, else
	// "devel". Never empty.
	Version string `json:"version"`
	// Commit is the full commit hash, "" when unknown.
	Commit string `json:"commit,omitempty"`
	// Built is when the binary was built (a release build) or the commit
	// time (the toolchain's vcs.time), RFC 3339; "" when unknown.
	Built string `json:"built,omitempty"`
	// Go is the toolchain's version (runtime.Version).
	Go string `json:"go"`
	// Platform is GOOS/GOARCH, with the GOARM level for 32-bit ARM
	// ("linux/arm (GOARM=7)").
	Platform string `json:"platform"`
}

// Get returns the running binary's build information.
func Get() Info { return get() }

// Version returns Get().Version.
func Version() string { return get().Version }

var get = sync.OnceValue(func() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, built, bi)
})

// resolve prefers the stamped values and falls back to bi (nil when the
// binary carries no build information).
func resolve(version, commit, built string, bi *debug.BuildInfo) Info {
	in := Info{Version: version, Commit: commit, Built: built, Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.time":
				if in.Built == "" {
					in.Built = s.Value
				}
			case "GOARM":
				if runtime.GOARCH == "arm" {
					in.Platform += " (GOARM=" + s.Value + ")"
				}
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	return in
}

// Text is what --version prints for program: its name and version on the
// first line, then the commit, build time, Go version and platform, one a
// line:
//
//	runnel-edge v0.4.0-3-g1a2b3c4
//	  commit:   1a2b3c4d5e6f...
//	  built:    2026-01-02T03:04:05Z
//	  go:       go1.26.8
//	  platform: linux/arm64
func (in Info) Text(program string) string {
	return fmt.Sprintf("%s %s\n  commit:   %s\n  built:    %s\n  go:       %s\n  platform: %s\n",
		program, in.Version, orUnknown(in.Commit), orUnknown(in.Built), in.Go, in.Platform)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
