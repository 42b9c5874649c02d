package postgres

// A migration file (migrations/*.sql) runs in steps, in order. Its text up
// to the first marker line, and after a line
//
//	-- touba:transaction
//
// is transactional: it runs in the migration's transaction, under the
// advisory lock, search_path touba, with a short lock_timeout (schema_migrate.go),
// together with the record that the step ran. After a line
//
//	-- touba:online
//
// each statement (up to its ';') runs alone, outside any transaction
// (schema_online.go), and is one of
//
//	CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name ON touba.table ...
//	DROP INDEX CONCURRENTLY IF EXISTS touba.name
//
// A line
//
//	-- touba:commit
//
// ends the transaction there: what follows runs in a new one (an online
// step with no statement). A migration that changes several tables the
// previous release writes commits between them, so that none of their
// locks is held while the next one is waited for.
//
// A line "-- touba:oldest-compatible NAME" raises the schema's recorded
// level (package schemacompat).
//
// What a migration may do to a schema that nodes of the previous release
// use while it runs (SPEC §8 "Rolling upgrades"), checked from 0013 on by
// TestMigrationsAreOnline:
//   - An index on a table that exists already is built online; one on a
//     table the same migration creates may be transactional.
//   - A transactional step is quick once it holds a table's lock, since it
//     holds it to its commit: no table rewrite, no full scan under ACCESS
//     EXCLUSIVE (a CHECK or FOREIGN KEY is added NOT VALID and validated in
//     a later step, which takes a weaker lock).
//   - Expand, then contract: a column, table or constraint the previous
//     release still reads or writes is not dropped, renamed or narrowed.
//     Release N+1 stops using it; N+2 removes it in a migration that
//     declares "-- touba:oldest-compatible" naming N+1's first migration,
//     so that no binary still using it can start on the schema.

import (
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"

	"github.com/touba/touba-trigger/internal/schemacompat"
)

// migration is one parsed migration file.
type migration struct {
	name   string // its file name, the key of schema_migrations
	oldest string // its oldest-compatible directive, "" when none
	steps  []mstep
}

// mstep is one step of a migration: transactional (sql) or online (stmts).
type mstep struct {
	online bool
	sql    string
	stmts  []onlineStmt
}

// onlineStmt is one statement of an online step.
type onlineStmt struct {
	sql string
	// inline is the statement without CONCURRENTLY: how a schema created
	// in this very transaction runs it (no one else can see its tables).
	inline string
	create bool   // an index build; else a drop
	schema string // of the index and its table
	index  string
	table  string // the build's table
}

const (
	markOnline      = "-- touba:online"
	markTransaction = "-- touba:transaction"
	markCommit      = "-- touba:commit"
)

var (
	createOnline = regexp.MustCompile(`(?is)^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+([a-z_][a-z0-9_]*)\s+ON\s+([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)[\s(]`)
	dropOnline   = regexp.MustCompile(`(?is)^DROP\s+INDEX\s+CONCURRENTLY\s+IF\s+EXISTS\s+([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)$`)
	concurrently = regexp.MustCompile(`(?i)\s+CONCURRENTLY\b`)
	lineComment  = regexp.MustCompile(`--[^\n]*`)
)

// loadMigrations parses migrations/*.sql of fsys, in the order they run.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	known := map[string]bool{}
	var ms []migration
	for _, name := range names {
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		m, err := parseMigration(name[strings.LastIndex(name, "/")+1:], string(body))
		if err != nil {
			return nil, err
		}
		known[m.name] = true
		if m.oldest != "" && !known[m.oldest] {
			return nil, fmt.Errorf("%s: oldest-compatible %s is no migration before it", m.name, m.oldest)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// parseMigration splits the migration name, of body, into its steps.
func parseMigration(name, body string) (migration, error) {
	m := migration{name: name}
	var err error
	if m.oldest, err = schemacompat.Declared(name, body); err != nil {
		return m, err
	}
	online := false
	var cur strings.Builder
	flush := func() error {
		text := cur.String()
		cur.Reset()
		code := lineComment.ReplaceAllString(text, "")
		if strings.TrimSpace(code) == "" {
			return nil
		}
		if !online {
			m.steps = append(m.steps, mstep{sql: text})
			return nil
		}
		s := mstep{online: true}
		for _, stmt := range strings.Split(code, ";") {
			if stmt = strings.TrimSpace(stmt); stmt == "" {
				continue
			}
			o, err := parseOnline(stmt)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			s.stmts = append(s.stmts, o)
		}
		m.steps = append(m.steps, s)
		return nil
	}
	for _, line := range strings.SplitAfter(body, "\n") {
		switch t := strings.TrimSpace(line); {
		case t == markOnline || t == markTransaction:
			if err := flush(); err != nil {
				return m, err
			}
			online = t == markOnline
		case t == markCommit:
			if err := flush(); err != nil {
				return m, err
			}
			m.steps = append(m.steps, mstep{online: true}) // no statement: the transaction ends
			online = false
		case strings.HasPrefix(t, "-- touba:") && !strings.HasPrefix(t, strings.TrimSpace(schemacompat.Directive)):
			return m, fmt.Errorf("%s: unknown directive %q", name, t)
		default:
			cur.WriteString(line)
		}
	}
	if err := flush(); err != nil {
		return m, err
	}
	if len(m.steps) == 0 {
		return m, fmt.Errorf("%s: no statement", name)
	}
	return m, nil
}

// parseOnline accepts the statements an online step may hold.
func parseOnline(stmt string) (onlineStmt, error) {
	o := onlineStmt{sql: stmt, inline: concurrently.ReplaceAllString(stmt, "")}
	if g := createOnline.FindStringSubmatch(stmt); g != nil {
		o.create, o.index, o.schema, o.table = true, g[1], g[2], g[3]
		return o, nil
	}
	if g := dropOnline.FindStringSubmatch(stmt); g != nil {
		o.schema, o.index = g[1], g[2]
		return o, nil
	}
	return o, fmt.Errorf("online statement %q: want CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name ON schema.table "+
		"or DROP INDEX CONCURRENTLY IF EXISTS schema.name", firstLine(stmt))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
