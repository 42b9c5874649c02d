package postgres

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/uuidv7"
)

// Partitioning (SPEC §8.1): the large tables are partitioned by time, the
// UUIDv7 queue id (or scope, or delivery id) ordering them: its first 48
// bits are the milliseconds of its creation. Every table has the same
// bounds, so that one range of queue ids, an entry with its runs,
// checkpoints, effects and their events, is forgotten together.
//
//	touba.entries            PARTITION BY LIST (kept)
//	  touba.entries_kept       kept rows: what --history must not forget
//	  touba.entries_live       PARTITION BY RANGE (queue_id)
//	    touba.entries_old        [MINVALUE, B): the table as it was before
//	    touba.entries_p<time>    [t, t+width), created ahead
//	    touba.entries_other      ['g', MAXVALUE): keys that are no UUID
//
// The delivery log has no kept rows: touba.deliveries is partitioned by
// RANGE (delivery_id) directly. Indexes are each leaf's own (a unique
// index on a partitioned table must hold the partition key: the identity
// (trigger_ref, event_id) cannot be one), copied from the newest leaf when
// a leaf is created; uniqueness across leaves is intake's (queue_identity.go).

// ptable is one partitioned table.
type ptable struct {
	name string
	key  string // the range key
	kept bool   // LIST (kept) first: <name>_kept and <name>_live
	// unread is the suffix of an index a new leaf does not copy: no
	// statement reads it, and each row paid an entry in it.
	unread string
}

// ptables in the order a range is forgotten: what refers to an entry
// before the entry, so that a pass stopped midway leaves no effect
// without its entry (only entries without their effects, which the next
// pass drops, and which can no longer run: forgetting() holds them).
var ptables = []ptable{
	{"effect_events", "scope", true, ""},
	{"effects", "scope", true, ""},
	{"run_steps", "queue_id", true, ""},
	// runs are read by queue_id only; run ids are random (UUIDv7), their
	// uniqueness was the unpartitioned table's primary key.
	{"runs", "queue_id", true, "_pkey"},
	{"entries", "queue_id", true, ""},
	{"deliveries", "delivery_id", false, ""},
}

// rangeParent is the table whose leaves are t's time partitions.
func (t ptable) rangeParent() string {
	if t.kept {
		return t.name + "_live"
	}
	return t.name
}

// otherFrom is the lower bound of <table>_other: above every UUID, whose
// text is lowercase hex.
const otherFrom = "1"

// idAt is the smallest UUIDv7 string of millisecond ms: a range bound.
func idAt(ms int64) string {
	return uuidv7.Floor(ms)
}

// boundText is ms as a text bound for comparisons: "" below everything
// for MINVALUE.
func boundText(ms int64) string {
	if ms <= minMS {
		return ""
	}
	return idAt(ms)
}

// msOf is the millisecond a bound or a UUIDv7 string names; ok is false
// for anything else.
func msOf(id string) (int64, bool) {
	if len(id) < 13 || id[8] != '-' {
		return 0, false
	}
	hi, err1 := strconv.ParseUint(id[:8], 16, 64)
	lo, err2 := strconv.ParseUint(id[9:13], 16, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return int64(hi<<16 | lo), true
}

// leafName names the time partition of t starting at ms.
func leafName(t ptable, ms int64) string {
	return t.name + "_p" + strings.ReplaceAll(time.UnixMilli(ms).UTC().Format("20060102t150405.000"), ".", "")
}

// PartitionWidth is the width of a time partition under --history
// window: an eighth of it, so that about nine partitions hold the window,
// and an entry is forgotten between window and window+width after its
// acceptance. Fewer, wider partitions keep intake's identity check (one
// index probe per partition) cheap.
//
// At least minWidth: each range costs a pass a freeze, whose CREATE
// TRIGGER waits for the leases' locks, and one-second partitions were
// created faster than passes could forget them (issue 42). At most 31
// days, which is also the width when nothing is forgotten (0): a dozen
// partitions a year, not one a day.
func PartitionWidth(window time.Duration) time.Duration {
	const maxWidth = 31 * 24 * time.Hour
	if window <= 0 {
		return maxWidth
	}
	return min(max((window/8).Truncate(time.Second), minWidth), maxWidth)
}

// minWidth is the narrowest partition.
const minWidth = 10 * time.Second

// partitionAhead is how far past now partitions exist: three widths, at
// least a minute, so that a node whose clock is ahead, or a pass that is
// late, never meets an id without its partition (enqueue and the log
// create one when they do, ensurePartitions).
func partitionAhead(width time.Duration) time.Duration { return max(3*width, 10*time.Second) }

// leaf is one partition of a range parent.
type leaf struct {
	name    string
	from    int64 // ms; minMS for MINVALUE
	to      int64 // ms; maxMS for MAXVALUE or the other partition
	other   bool  // ['g', MAXVALUE)
	pending bool  // a DETACH ... CONCURRENTLY did not end
}

const (
	minMS = -1 << 62
	maxMS = 1 << 62
)

var boundExpr = regexp.MustCompile(`FROM \((MINVALUE|'[^']*')\) TO \((MAXVALUE|'[^']*')\)`)

// leaves lists the partitions of parent (schema touba), oldest first.
//
// A bound holds constants only, so it is deparsed without its relation
// (pg_get_expr's 0, as PostgreSQL's documentation allows when no Vars are
// expected): given the partition's oid, pg_get_expr opens the partition
// for its column names, and a backend that had not opened it yet builds
// its relation entry, 3.5 times the listing's cost (a pass lists each
// table's partitions five times; at 100 partitions 32 listings took 41-85
// ms of a start).
func leaves(ctx context.Context, q querier, parent string) ([]leaf, error) {
	rows, err := q.Query(ctx, `SELECT c.relname, pg_get_expr(c.relpartbound, 0), i.inhdetachpending
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass($1)`, Schema+"."+parent)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", parent, err)
	}
	var out []leaf
	var name, bound string
	var pending bool
	_, err = pgx.ForEachRow(rows, []any{&name, &bound, &pending}, func() error {
		g := boundExpr.FindStringSubmatch(bound)
		if g == nil {
			return fmt.Errorf("partition %s: bound %q", name, bound)
		}
		l := leaf{name: name, from: minMS, to: maxMS, pending: pending}
		if g[1] != "MINVALUE" {
			v := strings.Trim(g[1], "'")
			if v >= otherFrom {
				l.other = true
			} else if ms, ok := msOf(v); ok {
				l.from = ms
			}
		}
		if g[2] != "MAXVALUE" {
			if ms, ok := msOf(strings.Trim(g[2], "'")); ok {
				l.to = ms
			}
		}
		out = append(out, l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", parent, err)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].from < out[k].from })
	return out, nil
}

// partitioned tells whether the table name is partitioned yet.
func partitioned(ctx context.Context, q querier, name string) (bool, error) {
	var kind string
	err := q.QueryRow(ctx, `SELECT COALESCE((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)), '')`, Schema+"."+name).Scan(&kind)
	return kind == "p", err
}

// indexTemplate is the CREATE INDEX statements of leaf src of table t,
// each with %[1]s in place of the table it builds on, and its name that
// table's name and the part of src's index name after its table's
// (entries_wake on entries_old: <leaf>_wake).
func indexTemplate(ctx context.Context, q querier, t ptable, src string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = to_regclass($1) ORDER BY c.relname`, Schema+"."+src)
	if err != nil {
		return nil, fmt.Errorf("indexes of %s: %w", src, err)
	}
	var out []string
	var name, def string
	on := regexp.MustCompile(`^(CREATE (?:UNIQUE )?INDEX) \S+ ON (?:ONLY )?` + regexp.QuoteMeta(Schema+"."+src) + ` `)
	_, err = pgx.ForEachRow(rows, []any{&name, &def}, func() error {
		if !on.MatchString(def) {
			return fmt.Errorf("index of %s: cannot copy %q", src, def)
		}
		suffix := strings.TrimPrefix(name, src)
		if suffix == name {
			suffix = strings.TrimPrefix(name, t.name)
		}
		if t.unread != "" && suffix == t.unread {
			return nil
		}
		out = append(out, on.ReplaceAllString(strings.ReplaceAll(def, "%", "%%"), "$1 %[1]s"+strings.ReplaceAll(suffix, "$", "$$")+" ON touba.%[1]s "))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("indexes of %s: %w", src, err)
	}
	return out, nil
}

// createLeaf creates the partition name of t, with src's indexes, and
// attaches it for [from, to): created apart and attached, the parent is
// only SHARE UPDATE EXCLUSIVE locked, which no read or write waits for
// (CREATE TABLE ... PARTITION OF would hold ACCESS EXCLUSIVE on it).
func createLeaf(ctx context.Context, q querier, t ptable, name, src, from, to string) error {
	tmpl, err := indexTemplate(ctx, q, t, src)
	if err != nil {
		return err
	}
	// One round trip: no argument, so the simple protocol, which takes
	// several statements in one message.
	stmts := tableSQL(t, name, tmpl, t.rangeParent(), fmt.Sprintf("FROM (%s) TO (%s)", from, to))
	if _, err := q.Exec(ctx, strings.Join(stmts, ";\n")); err != nil {
		return fmt.Errorf("create partition %s: %w", name, err)
	}
	return nil
}

// tableSQL creates the table name like t, with the indexes of tmpl
// (indexTemplate), and attaches it to parent FOR VALUES bounds.
func tableSQL(t ptable, name string, tmpl []string, parent, bounds string) []string {
	full := Schema + "." + name
	stmts := []string{fmt.Sprintf(`CREATE TABLE %s (LIKE %s.%s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, full, Schema, t.name)}
	for _, ix := range tmpl {
		stmts = append(stmts, fmt.Sprintf(ix, name))
	}
	return append(stmts, fmt.Sprintf(`ALTER TABLE %s.%s ATTACH PARTITION %s FOR VALUES %s`, Schema, parent, full, bounds))
}

// quote is s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
