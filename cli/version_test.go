package cli_test

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/touba/touba-trigger/cli"
)

// The version's sources in order (SPEC §9): a module release version
// (go install ...@v1.2.3), else the release script's -ldflags value, else
// "devel"; a pseudo-version the go command makes up from a commit is not a
// release.
func TestBuildVersion(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "-trimpath", Value: "true"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T19:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	for _, tc := range []struct {
		name, main, ldflags string
		settings            []debug.BuildSetting
		want                cli.VersionInfo
	}{
		{name: "go install @v1.2.3", main: "v1.2.3", ldflags: "",
			want: cli.VersionInfo{Version: "v1.2.3"}},
		{name: "module release wins over ldflags", main: "v1.2.3", ldflags: "1.2.3-rc1",
			want: cli.VersionInfo{Version: "v1.2.3"}},
		{name: "release script", main: "(devel)", ldflags: "1.4.0", settings: vcs,
			want: cli.VersionInfo{Version: "1.4.0", Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2026-12-01T19:00:00Z", Modified: true}},
		{name: "pseudo-version is not a release", main: "v0.0.0-20261201190000-0123456789ab+dirty", ldflags: "1.4.0",
			want: cli.VersionInfo{Version: "1.4.0"}},
		{name: "pseudo-version without ldflags", main: "v1.2.4-0.20261201190000-0123456789ab", ldflags: "",
			want: cli.VersionInfo{Version: "devel"}},
		{name: "plain go build", main: "(devel)", ldflags: "", settings: vcs[:4],
			want: cli.VersionInfo{Version: "devel", Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2026-12-01T19:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/touba/touba-trigger", Version: tc.main}, Settings: tc.settings}
			got := cli.BuildVersion(bi, tc.ldflags)
			tc.want.GoVersion, tc.want.Platform = "go1.99.1", runtime.GOOS+"/"+runtime.GOARCH
			if got != tc.want {
				t.Fatalf("BuildVersion=%+v, want %+v", got, tc.want)
			}
		})
	}
	if got, want := cli.BuildVersion(nil, "").Version, "devel"; got != want {
		t.Fatalf("no build info: version=%q, want %q", got, want)
	}
	if got, want := cli.BuildVersion(nil, "2.0.0").Version, "2.0.0"; got != want {
		t.Fatalf("no build info, ldflags: version=%q, want %q", got, want)
	}
}
