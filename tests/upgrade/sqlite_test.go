package upgrade_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestFilesAcrossReleases (SPEC §8 rolling upgrades, issue 33): this
// release opens the previous release's three SQLite files with what they
// hold (done entries and their identities, a parked entry its operator
// then settles), and the previous release opens them back once this one
// migrated them.
func TestFilesAcrossReleases(t *testing.T) {
	prev := previousBinary(t)
	r := newRemote(t)
	f := newFiles(t, r)
	q, s, j, sock := filepath.Join(f.dir, "q.sqlite"), filepath.Join(f.dir, "s.sqlite"), filepath.Join(f.dir, "j.sqlite"),
		filepath.Join(f.dir, "admin.sock")
	serve := func(bin string) *testkit.Daemon {
		return start(t, bin, f.program, "--manifest", f.manifest, "--queue", q, "--state", s, "--effect-journal", j,
			"--admin-socket", sock, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--workers", "4")
	}
	entries := func() map[string]*touba.Delivery {
		out := map[string]*touba.Delivery{}
		for _, e := range testkit.Entries(t, q) {
			out[e.EventID] = e
		}
		return out
	}
	waitDone := func(n int) {
		t.Helper()
		testkit.WaitFor(t, 60*time.Second, func() bool { return r.distinct() >= n }, fmt.Sprintf("%d writes at the remote", n))
	}

	old := serve(prev)
	for i := range 10 {
		mustPost(t, old.URL(), "Orders", fmt.Sprintf("o-%d", i), fmt.Sprintf(`{"n": %d}`, i), 202)
	}
	mustPost(t, old.URL(), "Risky", "risky", `{"n": "park"}`, 202)
	waitDone(10)
	testkit.WaitFor(t, 60*time.Second, func() bool {
		return countStatus(t, old, "parked") == 1
	}, "the risky order to park under the previous release")
	stop(t, old)

	neu := serve(testkit.Binary(t))
	mustPost(t, neu.URL(), "Orders", "o-3", `{"n": 3}`, 200) // consumed under the previous release: never run again
	mustPost(t, neu.URL(), "Orders", "o-3", `{"n": 33}`, 409)
	for i := 10; i < 20; i++ {
		mustPost(t, neu.URL(), "Orders", fmt.Sprintf("o-%d", i), fmt.Sprintf(`{"n": %d}`, i), 202)
	}
	waitDone(20)
	risky := entries()["risky"]
	if risky == nil || risky.Status != touba.StatusParked {
		t.Fatalf("the parked entry under this release: %+v", risky)
	}
	cli := exec.Command(testkit.Binary(t), "effects", "resolve", risky.QueueID, touba.EffectIDFor(risky.QueueID, "write", 0),
		"--applied", "--receipt-ref", "ops:checked", "--admin-socket", sock)
	if out, err := cli.CombinedOutput(); err != nil {
		t.Fatalf("effects resolve under this release: %v\n%s", err, out)
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return countStatus(t, neu, "done") == 21 }, "every entry done under this release")
	stop(t, neu)

	// Release N on N+1's files.
	again := serve(prev)
	mustPost(t, again.URL(), "Orders", "o-20", `{"n": 20}`, 202)
	mustPost(t, again.URL(), "Orders", "o-15", `{"n": 15}`, 200)
	waitDone(21)
	stop(t, again)
	for id, e := range entries() {
		if e.Status != touba.StatusDone {
			t.Errorf("%s is %s, want done", id, e.Status)
		}
	}
	if n := len(entries()); n != 22 {
		t.Errorf("%d entries, want 22", n)
	}
}

// countStatus counts the entries in status through the daemon's admin
// socket, with this release's CLI.
func countStatus(t *testing.T, d *testkit.Daemon, status string) int {
	t.Helper()
	sock := ""
	for i, a := range d.Cmd.Args {
		if a == "--admin-socket" {
			sock = d.Cmd.Args[i+1]
		}
	}
	out, err := exec.Command(testkit.Binary(t), "queue", "ls", "--status", status, "--admin-socket", sock, "--json", "--limit", "1000").Output()
	if err != nil {
		t.Fatalf("queue ls: %v", err)
	}
	var es []json.RawMessage
	if err := json.Unmarshal(out, &es); err != nil {
		t.Fatalf("queue ls: %v: %s", err, out)
	}
	return len(es)
}
