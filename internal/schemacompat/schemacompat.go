// Package schemacompat is the recorded oldest-compatible level of a schema
// (SPEC §8 "Rolling upgrades"), shared by the PostgreSQL schema and the
// three SQLite files: the oldest migration a binary must know to run on
// the schema. A binary whose newest migration is older refuses to start
// (SchemaTooNew), instead of misreading or damaging what a newer release
// wrote.
//
// A migration raises the level with a directive line
//
//	-- touba:oldest-compatible 0016_drop_x.sql
//
// meaning: once this migration runs, binaries that do not know 0016_drop_x
// must not run on the schema (it contracts something they still use). The
// level only ever rises, and is written no later than the migration's own
// changes, so no binary it excludes can start on them.
//
// Levels are migration file names, compared bytewise: the order in which
// the migrations are applied (sort.Strings). The level carries the newest
// migration of the binary that set it, so a refusal can name that release.
package schemacompat

import (
	"fmt"
	"sort"
	"strings"

	touba "github.com/touba/touba-trigger"
)

// Keys of the level in a schema's key/value table.
const (
	KeyOldest = "oldest_compatible"
	KeySetBy  = "oldest_compatible_set_by" // the newest migration of the binary that set it
)

// Directive starts the line by which a migration raises the level.
const Directive = "-- touba:oldest-compatible "

// Declared returns the level that the migration name, of body, declares
// ("" when none). It refuses a directive twice, a level that is not a
// migration file name, and one past the migration itself: no binary could
// know a migration written after this one.
func Declared(name, body string) (string, error) {
	var level string
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, strings.TrimSpace(Directive)) {
			continue
		}
		v := strings.TrimSpace(strings.TrimPrefix(line, strings.TrimSpace(Directive)))
		switch {
		case level != "":
			return "", fmt.Errorf("%s: more than one %q", name, strings.TrimSpace(Directive))
		case !strings.HasSuffix(v, ".sql") || strings.ContainsAny(v, " \t/"):
			return "", fmt.Errorf("%s: %q names no migration file", name, line)
		case v > name:
			return "", fmt.Errorf("%s: oldest-compatible %s is later than the migration itself", name, v)
		}
		level = v
	}
	return level, nil
}

// Newest returns the last of the migration file names, "" for none.
func Newest(names []string) string {
	s := append([]string(nil), names...)
	sort.Strings(s)
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// Check refuses, SchemaTooNew, a binary whose newest migration is older
// than the level recorded in the schema where ("" recorded: none). by is
// the recorded newest migration of the binary that set the level.
func Check(where, newest, recorded, by string) error {
	if recorded == "" || recorded <= newest {
		return nil
	}
	setBy := ""
	if by != "" {
		setBy = fmt.Sprintf(" (recorded by a release that knows up to %s)", Display(by))
	}
	return touba.Errorf(touba.ESchemaTooNew, "%s needs a release that knows migration %s or later%s; "+
		"this binary knows up to %s: run a newer release on it", where, Display(recorded), setBy, Display(newest))
}

// Display is a migration's name as messages show it.
func Display(name string) string { return strings.TrimSuffix(name, ".sql") }
