package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// TestResolve: stamped values win; the toolchain's build information
// fills what was not stamped; "devel" when there is neither.
func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "v0.4.1-0.20260101000000-1a2b3c4d5e6f+dirty"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "1a2b3c4d5e6f"}, {Key: "vcs.time", Value: "2026-01-01T00:00:00Z"}, {Key: "GOARM", Value: "7"}}}
	arm := ""
	if runtime.GOARCH == "arm" {
		arm = " (GOARM=7)"
	}
	for _, tc := range []struct {
		name                   string
		version, commit, built string
		bi                     *debug.BuildInfo
		want                   Info
	}{
		{"stamped", "v0.4.0-3-g9f8e7d6-dirty", "9f8e7d6", "2026-02-03T04:05:06Z", vcs,
			Info{Version: "v0.4.0-3-g9f8e7d6-dirty", Commit: "9f8e7d6", Built: "2026-02-03T04:05:06Z"}},
		{"toolchain", "", "", "", vcs,
			Info{Version: "v0.4.1-0.20260101000000-1a2b3c4d5e6f+dirty", Commit: "1a2b3c4d5e6f", Built: "2026-01-01T00:00:00Z"}},
		{"version only stamped", "v1.0.0", "", "", vcs, Info{Version: "v1.0.0", Commit: "1a2b3c4d5e6f", Built: "2026-01-01T00:00:00Z"}},
		{"go install", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}, Info{Version: "v0.4.0"}},
		{"devel", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, Info{Version: "devel"}},
		{"no build info", "", "", "", nil, Info{Version: "devel"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.version, tc.commit, tc.built, tc.bi)
			tc.want.Go, tc.want.Platform = runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH
			if tc.bi == vcs {
				tc.want.Platform += arm
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestText(t *testing.T) {
	in := Info{Version: "v1.2.3", Commit: "abc", Go: "go1.26.8", Platform: "linux/arm (GOARM=7)"}
	want := "runnel-edge v1.2.3\n  commit:   abc\n  built:    unknown\n  go:       go1.26.8\n  platform: linux/arm (GOARM=7)\n"
	if got := in.Text("runnel-edge"); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
