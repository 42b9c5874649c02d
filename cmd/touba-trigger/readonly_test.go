package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// fileStamp is what a write would change of a file: size and mtime.
type fileStamp struct {
	size  int64
	mtime time.Time
	there bool
}

func stamps(t *testing.T, paths ...string) map[string]fileStamp {
	t.Helper()
	out := map[string]fileStamp{}
	for _, p := range paths {
		for _, f := range []string{p, p + "-wal"} {
			fi, err := os.Stat(f)
			if err == nil {
				out[f] = fileStamp{fi.Size(), fi.ModTime(), true}
			} else if !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	}
	return out
}

// TestReadOnlyCommandsNeedNoLock (SPEC §6): with no daemon, ls and show open
// the files read-only without the journal lock, even over a stale lock
// record, while a command that changes something still refuses
// (JournalLockStale, exit 3); they write nothing to the files (database
// and WAL keep their size and mtime), and work beside a live daemon too. On the old code
// `queue ls` over the stale record exited 3 JournalLockStale, and beside
// the daemon exited 3 JournalLocked; so did `triggers ls` until it, too,
// opened the files read-only.
func TestReadOnlyCommandsNeedNoLock(t *testing.T) {
	e := newOpEnv(t, opProgram, opManifest)
	d := e.start(t)
	q := parkCharge(t, e, d)

	// Beside the live daemon, missing its socket: read, write nothing.
	other := *e
	other.socket = filepath.Join(e.dir, "elsewhere.sock")
	for _, args := range [][]string{{"queue", "ls"}, {"queue", "show", q}, {"effects", "ls"}, {"deliveries", "ls"},
		{"queue", "ls", "--event-id", "order-1"}, {"triggers", "ls"}} {
		code, out, errs := other.cli(t, args...)
		if code != 0 {
			t.Fatalf("%v beside the daemon: exit %d\n%s%s", args, code, out, errs)
		}
		if args[1] == "ls" && args[0] == "queue" && !strings.Contains(out, q) {
			t.Fatalf("%v beside the daemon does not list %s:\n%s", args, q, out)
		}
	}
	if code, _, errs := other.cli(t, "queue", "replay", q); code != 3 || !strings.Contains(errs, "JournalLocked") {
		t.Fatalf("queue replay beside the daemon: exit %d, want 3 JournalLocked\n%s", code, errs)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}

	// A stale lock record: a dead pid.
	if err := os.WriteFile(e.journal+".lock", []byte(`{"pid": 999999999, "host": "elsewhere", "boot_id": "b", "started_at": "2026-01-01T00:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// With the daemon stopped nothing else writes the files: the read-only
	// commands must not either (beside a live daemon its own checkpoints
	// change them).
	before := stamps(t, e.queue, e.state, e.journal)
	var list []opEntry
	e.cliJSON(t, &list, "queue", "ls")
	if len(list) != 1 || list[0].QueueID != q || list[0].Status != "parked" {
		t.Fatalf("queue ls over a stale lock: %+v", list)
	}
	for _, args := range [][]string{{"queue", "show", q}, {"effects", "ls", "--state", "unknown"}, {"deliveries", "ls"},
		{"queue", "ls", "--body", "/order_id=1"}, {"triggers", "ls"}} {
		if code, out, errs := e.cli(t, args...); code != 0 {
			t.Fatalf("%v over a stale lock: exit %d\n%s%s", args, code, out, errs)
		}
	}
	// SQLite opens a WAL database read-only only with its -wal and -shm
	// files there: after the daemon's clean stop removed them it makes them
	// again, empty. That is no write of the data.
	after := stamps(t, e.queue, e.state, e.journal)
	for f, a := range after {
		if _, ok := before[f]; !ok && (!strings.HasSuffix(f, "-wal") || a.size != 0) {
			t.Errorf("%s appeared under read-only commands: %+v", f, a)
		}
	}
	for f, b := range before {
		if a := after[f]; a != b {
			t.Errorf("%s changed under read-only commands: %+v -> %+v", f, b, a)
		}
	}
	for _, args := range [][]string{{"queue", "replay", q}, {"queue", "replay", "--status", "parked", "--dry-run"},
		{"effects", "resolve", q, q + ":charge", "--not-applied"}} {
		if code, _, errs := e.cli(t, args...); code != 3 || !strings.Contains(errs, "JournalLockStale") {
			t.Fatalf("%v over a stale lock: exit %d, want 3 JournalLockStale\n%s", args, code, errs)
		}
	}
	if _, err := os.Stat(e.journal + ".lock"); err != nil {
		t.Fatalf("the stale record is gone: %v", err)
	}
}

// TestSearchReplayAndReason: queue ls finds an entry by event id and by a
// body field (newest first, with the footer), a bulk replay counts first
// (--dry-run changes nothing), replays, and records the operator's reason;
// so do resolve and the audit trail of queue show.
func TestSearchReplayAndReason(t *testing.T) {
	e := newOpEnv(t, opProgram, opManifest)
	d := e.start(t)
	q := parkCharge(t, e, d)
	for i, id := range []string{"order-2", "order-3"} {
		if status, _ := testkit.Post(t, d.URL()+"/triggers/ops/Orders", id, `{"order_id": `+string(rune('2'+i))+`, "customer": {"id": "cus_7"}}`); status != 202 {
			t.Fatalf("post %s: %d", id, status)
		}
	}
	var rep struct {
		Entries []opEntry `json:"entries"`
		Scanned int       `json:"scanned"`
		More    bool      `json:"more"`
	}
	e.cliJSON(t, &rep, "queue", "ls", "--event-id", "order-1")
	if len(rep.Entries) != 1 || rep.Entries[0].QueueID != q || rep.More {
		t.Fatalf("queue ls --event-id order-1: %+v", rep)
	}
	e.cliJSON(t, &rep, "queue", "ls", "--body", "/customer/id=cus_7")
	if len(rep.Entries) != 2 || rep.Scanned != 3 || rep.More {
		t.Fatalf("queue ls --body: %+v", rep)
	}
	code, out, errs := e.cli(t, "queue", "ls", "--body", "/customer/id=cus_7", "--max-scan", "1")
	if code != 0 || !strings.Contains(out, "searched 1 entries") || !strings.Contains(out, "more exist") {
		t.Fatalf("bounded body search: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := e.cli(t, "queue", "ls", "--body", "order_id=1"); code == 0 || !strings.Contains(errs, "BadRequest") {
		t.Fatalf("a pointer without its slash: exit %d\n%s", code, errs)
	}

	// Bulk replay of the parked entry, resolved first so it replays.
	code, out, errs = e.cli(t, "effects", "resolve", q, q+":charge", "--applied", "--receipt-ref", "ch_1", "--reason", "INC-42: found the charge")
	if code != 0 {
		t.Fatalf("resolve: exit %d\n%s%s", code, out, errs)
	}
	var show struct {
		Operator []struct {
			Action string `json:"action"`
			Reason string `json:"reason"`
		} `json:"operator_events"`
		Effects []struct {
			Events []struct {
				Detail string `json:"detail"`
			} `json:"events"`
		} `json:"effects"`
	}
	e.cliJSON(t, &show, "queue", "show", q)
	if n := len(show.Operator); n == 0 || show.Operator[n-1].Action != "effects.resolve" || show.Operator[n-1].Reason != "INC-42: found the charge" {
		t.Fatalf("audit trail of the resolve: %+v", show.Operator)
	}
	found := false
	for _, eff := range show.Effects {
		for _, ev := range eff.Events {
			found = found || strings.Contains(ev.Detail, "reason: INC-42: found the charge")
		}
	}
	if !found {
		t.Fatalf("the journal's resolve event has no reason: %+v", show.Effects)
	}
	code, out, errs = e.cli(t, "queue", "replay", "--status", "failed", "--dry-run")
	if code != 0 || !strings.Contains(out, "no failed entries") {
		t.Fatalf("dry run with nothing failed: exit %d\n%s%s", code, out, errs)
	}
	var dry struct {
		Matched int  `json:"matched"`
		DryRun  bool `json:"dry_run"`
	}
	code, out, _ = e.cli(t, "queue", "replay", "--status", "parked", "--trigger", "ops/Orders", "--since", "1h", "--dry-run", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &dry) != nil || !dry.DryRun {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
}
