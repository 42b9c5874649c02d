package postgres

import (
	"regexp"
	"strings"
	"testing"
)

// The embedded migrations parse, and 0013 and 0014 build their indexes
// online: 0013 builds the new key online, moves the primary key onto it
// in a transaction, and drops the old index online; 0014 adds its column
// in a transaction and builds its index online.
func TestMigrationSteps(t *testing.T) {
	ms := embeddedMigrations(t)
	kinds := func(m migration) string {
		var s []string
		for _, st := range m.steps {
			s = append(s, map[bool]string{true: "online", false: "transaction"}[st.online])
		}
		return strings.Join(s, ",")
	}
	for _, m := range ms {
		want := "transaction"
		switch m.name {
		case "0013_pgspeed_event_key.sql":
			want = "online,transaction,online"
		case "0014_fair.sql":
			want = "transaction,online"
		case "0015_gather.sql":
			want = "transaction,online,transaction"
		case "0015_history.sql": // a commit (an online step with no statement) after each table
			want = "transaction,online,transaction,online,transaction,online,transaction,online,transaction,online,transaction"
		case "0016_schedule_cursor.sql": // the new table committed before the backfill reads entries
			want = "transaction,online,transaction"
		}
		if got := kinds(m); got != want {
			t.Errorf("%s: steps %s, want %s", m.name, got, want)
		}
	}
	if got := ms[len(ms)-1].name; got != "0024_effect_settled.sql" {
		t.Fatalf("newest migration %s", got)
	}
	var o onlineStmt
	for _, m := range ms {
		if m.name == "0014_fair.sql" {
			o = m.steps[1].stmts[0]
		}
	}
	if !o.create || o.schema != "touba" || o.index != "entries_hold" || o.table != "entries" ||
		!strings.HasPrefix(o.inline, "CREATE INDEX IF NOT EXISTS entries_hold ON touba.entries") {
		t.Fatalf("0014's online statement parsed as %+v", o)
	}
}

func TestParseMigrationRefuses(t *testing.T) {
	for _, tt := range []struct{ name, body, want string }{
		{"plain index online", "-- touba:online\nCREATE INDEX x ON touba.entries (a);", "online statement"},
		{"unqualified table", "-- touba:online\nCREATE INDEX CONCURRENTLY IF NOT EXISTS x ON entries (a);", "online statement"},
		{"no IF NOT EXISTS", "-- touba:online\nCREATE INDEX CONCURRENTLY x ON touba.entries (a);", "online statement"},
		{"other statement online", "-- touba:online\nALTER TABLE touba.entries ADD COLUMN x TEXT;", "online statement"},
		{"unknown directive", "-- touba:onlien\nSELECT 1;", "unknown directive"},
		{"level past itself", "-- touba:oldest-compatible 0099_x.sql\nSELECT 1;", "later than the migration"},
		{"level twice", "-- touba:oldest-compatible 0001_a.sql\n-- touba:oldest-compatible 0001_a.sql\nSELECT 1;", "more than one"},
		{"nothing", "-- only a comment\n", "no statement"},
	} {
		if _, err := parseMigration("0050_x.sql", tt.body); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}

// The rules of schema_migfile.go for what a migration may do beside the previous
// release, from 0013 on (the ones before ran in one transaction before
// rolling upgrades were promised, and stay as databases applied them).
// Checked on the text of each transactional step; the old form of 0013
// breaks them, so the check can tell.
func TestMigrationsAreOnline(t *testing.T) {
	for _, m := range embeddedMigrations(t) {
		if m.name < "0013" {
			continue
		}
		for _, problem := range blockingStatements(m) {
			t.Errorf("%s: %s", m.name, problem)
		}
	}
	old, err := parseMigration("0013_pgspeed_event_key.sql", old0013)
	if err != nil {
		t.Fatal(err)
	}
	if got := blockingStatements(old); len(got) != 2 {
		t.Fatalf("old 0013: %q, want its plain CREATE INDEX and DROP INDEX refused", got)
	}
}

var (
	createdTable  = regexp.MustCompile(`(?is)\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:touba\.)?(\w+)`)
	plainIndex    = regexp.MustCompile(`(?is)^CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?\w+\s+ON\s+(?:ONLY\s+)?(?:touba\.)?(\w+)`)
	plainDrop     = regexp.MustCompile(`(?is)^DROP\s+INDEX\b`)
	alterTable    = regexp.MustCompile(`(?is)^ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?(?:touba\.)?(\w+)`)
	indexedAdd    = regexp.MustCompile(`(?is)\bADD\s+(?:CONSTRAINT\s+\w+\s+)?(?:PRIMARY\s+KEY|UNIQUE)\s*\(`)
	validatedAdd  = regexp.MustCompile(`(?is)\bADD\s+(?:CONSTRAINT\s+\w+\s+)?(?:CHECK|FOREIGN\s+KEY)\b`)
	contracting   = regexp.MustCompile(`(?is)\b(DROP\s+COLUMN|DROP\s+TABLE|RENAME|ALTER\s+COLUMN\s+\w+\s+(?:SET\s+DATA\s+)?TYPE|SET\s+NOT\s+NULL)\b`)
	rewritingType = regexp.MustCompile(`(?is)\bADD\s+COLUMN\b.*\bDEFAULT\s+(?:now|clock_timestamp|random|gen_random_uuid|nextval)\b`)
)

// blockingStatements lists what in m's transactional steps would hold a
// lock the previous release's reads or writes wait for, for longer than
// an instant, or contract what it may still use without a declared level.
func blockingStatements(m migration) []string {
	var out []string
	created := map[string]bool{}
	for _, st := range m.steps {
		for _, g := range createdTable.FindAllStringSubmatch(st.sql, -1) {
			created[g[1]] = true
		}
	}
	for _, st := range m.steps {
		if st.online {
			continue
		}
		for _, stmt := range strings.Split(lineComment.ReplaceAllString(st.sql, ""), ";") {
			stmt = strings.TrimSpace(stmt)
			if g := plainIndex.FindStringSubmatch(stmt); g != nil && !created[g[1]] {
				out = append(out, "index built in the transaction on existing table "+g[1]+" (build it online): "+firstLine(stmt))
			}
			if plainDrop.MatchString(stmt) {
				out = append(out, "index dropped in the transaction (drop it online): "+firstLine(stmt))
			}
			g := alterTable.FindStringSubmatch(stmt)
			if g == nil || created[g[1]] {
				continue
			}
			if indexedAdd.MatchString(stmt) {
				out = append(out, "constraint that builds an index under ACCESS EXCLUSIVE (build it online, then ADD ... USING INDEX): "+firstLine(stmt))
			}
			if validatedAdd.MatchString(stmt) && !strings.Contains(strings.ToUpper(stmt), "NOT VALID") {
				out = append(out, "constraint validated under ACCESS EXCLUSIVE (add it NOT VALID, VALIDATE it in a later step): "+firstLine(stmt))
			}
			if rewritingType.MatchString(stmt) {
				out = append(out, "column with a volatile default rewrites the table: "+firstLine(stmt))
			}
			if c := contracting.FindString(stmt); c != "" && m.oldest == "" {
				out = append(out, "contracts the schema ("+c+") without a -- touba:oldest-compatible level: "+firstLine(stmt))
			}
		}
	}
	return out
}
