package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
)

// develVersion is the version of a build that carries none.
const develVersion = "devel"

// VersionInfo is what `touba-trigger version` prints (SPEC §9), and its
// --json form.
type VersionInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"` // VCS revision, when the build recorded one
	Time      string `json:"time,omitempty"`     // its commit time, RFC 3339
	Modified  bool   `json:"modified"`           // the work tree had uncommitted changes
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// pseudoVersion matches the versions the go command makes up from a
// commit (v0.0.0-20261201193311-abcdef123456, +dirty): not a release.
var pseudoVersion = regexp.MustCompile(`(^|[-.])(0\.)?\d{14}-[0-9a-f]{12}(\+dirty)?$`)

// BuildVersion reads the version from the build info bi (nil when the
// binary has none) and the -ldflags value ldflags: the module's version
// when it is a release (`go install ...@v1.2.3`), else the release
// script's value, else "devel". The revision, its time and the modified
// flag come from the VCS stamp the go command records (-buildvcs).
func BuildVersion(bi *debug.BuildInfo, ldflags string) VersionInfo {
	v := VersionInfo{Version: develVersion, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		if ldflags != "" {
			v.Version = ldflags
		}
		return v
	}
	if bi.GoVersion != "" {
		v.GoVersion = bi.GoVersion
	}
	switch mv := bi.Main.Version; {
	case mv != "" && mv != "(devel)" && !pseudoVersion.MatchString(mv):
		v.Version = mv
	case ldflags != "":
		v.Version = ldflags
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// PrintVersion writes v as indented JSON with asJSON, else for people:
// the first line is "touba-trigger VERSION", as scripts that grep it
// expect.
func PrintVersion(w io.Writer, v VersionInfo, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	fmt.Fprintln(w, "touba-trigger", v.Version)
	rev := v.Revision
	if rev == "" {
		rev = "unknown (built without VCS information)"
	} else if v.Modified {
		rev += " (modified)"
	}
	fmt.Fprintf(w, "  revision  %s\n", rev)
	if v.Time != "" {
		fmt.Fprintf(w, "  time      %s\n", v.Time)
	}
	fmt.Fprintf(w, "  go        %s %s\n", v.GoVersion, v.Platform)
	return nil
}
