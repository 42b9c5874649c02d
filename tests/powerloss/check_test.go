package powerloss_test

import (
	"database/sql"
	"fmt"
	"sort"
	"strings"
)

// appliedNow reads, while the daemon runs, the effects its journal has
// committed as applied. In WAL mode a reader sees a commit only once the
// writer has synced it (with synchronous=FULL), so each of these must
// survive any later cut. Read-only, through the mount, like the daemon's
// own readers.
func (w *world) appliedNow() ([]string, error) {
	db, err := sql.Open("sqlite3", "file:"+w.d.path("j.sqlite")+"?mode=ro&_busy_timeout=10000")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.Query(`SELECT effect_id FROM effects WHERE state = 'applied'`)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return nil, nil // the first start has not migrated the journal yet
		}
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// findings are the broken promises one check found.
type findings struct {
	lostDeliveries []string // event ids answered 202 and not in the queue
	unjournaled    []string // effect ids the remote saw with no dispatched (or later) record
	lostApplied    []string // effect ids seen applied before a cut and not applied after
	repeated       []string // effect ids written more than once (retry_mode none)
	broken         []string // files that do not open cleanly
	effects        int      // effect ids the remote saw, all checked
}

func (f *findings) any() bool {
	return len(f.lostDeliveries)+len(f.unjournaled)+len(f.lostApplied)+len(f.repeated)+len(f.broken) > 0
}

func (f *findings) String() string {
	var b strings.Builder
	for _, l := range []struct {
		what string
		ids  []string
	}{{"deliveries answered 202 and lost", f.lostDeliveries},
		{"remote writes without their dispatched record", f.unjournaled},
		{"applied records lost", f.lostApplied},
		{"effects written more than once", f.repeated},
		{"files that do not open cleanly", f.broken}} {
		if len(l.ids) > 0 {
			sort.Strings(l.ids)
			fmt.Fprintf(&b, "%d %s, e.g. %v; ", len(l.ids), l.what, l.ids[:min(5, len(l.ids))])
		}
	}
	return b.String()
}

// check reads the files after a cut, with no daemon running, against what
// the test saw: the 202s, the remote's writes and the applied records seen
// before the cut.
func (w *world) check(applied map[string]bool) *findings {
	f := &findings{}
	states := map[string]string{}
	queue := map[string]bool{}
	for _, name := range []string{"q.sqlite", "s.sqlite", "j.sqlite"} {
		if err := integrity(w.d.path(name)); err != nil {
			f.broken = append(f.broken, fmt.Sprintf("%s: %v", name, err))
		}
	}
	if err := query(w.d.path("q.sqlite"), `SELECT queue_id, '' FROM entries`, func(id, _ string) { queue[id] = true }); err != nil {
		f.broken = append(f.broken, fmt.Sprintf("q.sqlite: %v", err))
	}
	if err := query(w.d.path("j.sqlite"), `SELECT effect_id, state FROM effects`, func(id, st string) { states[id] = st }); err != nil {
		f.broken = append(f.broken, fmt.Sprintf("j.sqlite: %v", err))
	}
	for ev, qid := range w.ackedCopy() {
		if !queue[qid] {
			f.lostDeliveries = append(f.lostDeliveries, ev)
		}
	}
	for id, n := range w.remote.writes() {
		f.effects++
		switch states[id] {
		case "dispatched", "applied", "not_applied", "unknown":
		default:
			f.unjournaled = append(f.unjournaled, fmt.Sprintf("%s(%q)", id, states[id]))
		}
		if n > 1 {
			f.repeated = append(f.repeated, fmt.Sprintf("%s(x%d)", id, n))
		}
	}
	for id := range applied {
		if states[id] != "applied" {
			f.lostApplied = append(f.lostApplied, fmt.Sprintf("%s(%q)", id, states[id]))
		}
	}
	return f
}

// integrity runs PRAGMA integrity_check on the file at path.
func integrity(path string) error {
	var res []string
	if err := query(path, `SELECT integrity_check, '' FROM pragma_integrity_check`, func(r, _ string) { res = append(res, r) }); err != nil {
		return err
	}
	if len(res) != 1 || res[0] != "ok" {
		return fmt.Errorf("integrity_check: %v", res)
	}
	return nil
}

// query runs q (two text columns) on the SQLite file at path, which must
// exist: opening it runs SQLite's recovery, as the restarted daemon would.
func query(path, q string, row func(a, b string)) error {
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=rw&_busy_timeout=10000")
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.Query(q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var a, b string
		if err := rows.Scan(&a, &b); err != nil {
			return err
		}
		row(a, b)
	}
	return rows.Err()
}
