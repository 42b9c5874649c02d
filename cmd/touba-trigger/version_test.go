package main

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
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
		want                versionInfo
	}{
		{name: "go install @v1.2.3", main: "v1.2.3", ldflags: "",
			want: versionInfo{Version: "v1.2.3"}},
		{name: "module release wins over ldflags", main: "v1.2.3", ldflags: "1.2.3-rc1",
			want: versionInfo{Version: "v1.2.3"}},
		{name: "release script", main: "(devel)", ldflags: "1.4.0", settings: vcs,
			want: versionInfo{Version: "1.4.0", Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2026-12-01T19:00:00Z", Modified: true}},
		{name: "pseudo-version is not a release", main: "v0.0.0-20261201190000-0123456789ab+dirty", ldflags: "1.4.0",
			want: versionInfo{Version: "1.4.0"}},
		{name: "pseudo-version without ldflags", main: "v1.2.4-0.20261201190000-0123456789ab", ldflags: "",
			want: versionInfo{Version: "devel"}},
		{name: "plain go build", main: "(devel)", ldflags: "", settings: vcs[:4],
			want: versionInfo{Version: "devel", Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2026-12-01T19:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/touba/touba-trigger", Version: tc.main}, Settings: tc.settings}
			got := buildVersion(bi, tc.ldflags)
			tc.want.GoVersion, tc.want.Platform = "go1.99.1", runtime.GOOS+"/"+runtime.GOARCH
			if got != tc.want {
				t.Fatalf("buildVersion=%+v, want %+v", got, tc.want)
			}
		})
	}
	if got, want := buildVersion(nil, "").Version, "devel"; got != want {
		t.Fatalf("no build info: version=%q, want %q", got, want)
	}
	if got, want := buildVersion(nil, "2.0.0").Version, "2.0.0"; got != want {
		t.Fatalf("no build info, ldflags: version=%q, want %q", got, want)
	}
}

// `version`, `--version` and `version --json` through the CLI's Run, on
// this test binary's own build info.
func TestVersionCommand(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errb bytes.Buffer
		if code := Run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d, stderr %s", args, code, errb.String())
		}
		first, _, _ := strings.Cut(out.String(), "\n")
		if got, want := first, "touba-trigger "+Version; got != want {
			t.Fatalf("%v: first line %q, want %q", args, got, want)
		}
		if !strings.Contains(out.String(), runtime.Version()) {
			t.Fatalf("%v: no Go version in %q", args, out.String())
		}
	}
	for _, args := range [][]string{{"version", "--json"}, {"--version", "--json"}} {
		var out, errb bytes.Buffer
		if code := Run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d, stderr %s", args, code, errb.String())
		}
		var v map[string]any
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatalf("%v: %v in %s", args, err, out.String())
		}
		for _, k := range []string{"version", "go_version", "platform", "modified"} {
			if _, ok := v[k]; !ok {
				t.Fatalf("%v: no %q in %s", args, k, out.String())
			}
		}
		if got, want := v["go_version"], runtime.Version(); got != want {
			t.Fatalf("go_version=%v, want %v", got, want)
		}
	}
	var out, errb bytes.Buffer
	if code := Run(ctx, []string{"version", "extra"}, &out, &errb); code != exitUsage {
		t.Fatalf("version extra: exit %d, want %d", code, exitUsage)
	}
}
