package gather_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/testkit"
)

// Rolling upgrades (SPEC §8): the release before gatherings runs on the
// schema this one made, and leaves alone what it does not know: a carrier
// waiting in its gathering (it never wakes it, never parks it) and the
// entries merged into it (never leased; a redelivery of one is 200
// consumed). Its loader refuses a program with debounce or /events, so it
// runs the same program without them. The test builds that release from
// this repository's history: the commit before gathering's first.

var (
	previousOnce sync.Once
	previousBin  string
	previousErr  error
	previousSkip string
)

// previousRelease builds the daemon as it was before gatherings.
func previousRelease(t *testing.T) string {
	t.Helper()
	previousOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			previousErr = err
			return
		}
		git := func(args ...string) (string, error) {
			out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
			return strings.TrimSpace(string(out)), err
		}
		first, err := git("log", "--format=%H", "--diff-filter=A", "--", "gather.go")
		if err != nil || first == "" {
			previousSkip = fmt.Sprintf("no git history to build the previous release from (%v)", err)
			return
		}
		lines := strings.Split(first, "\n")
		before := lines[len(lines)-1] + "^"
		dir, err := gobuild.Dir()
		if err != nil {
			previousErr = err
			return
		}
		src := filepath.Join(dir, "previous")
		if err := os.MkdirAll(src, 0o700); err != nil {
			previousErr = err
			return
		}
		archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, before, src)
		if out, err := archive.CombinedOutput(); err != nil {
			previousSkip = fmt.Sprintf("cannot extract %s: %v %s", before, err, out)
			return
		}
		previousBin = filepath.Join(dir, "touba-trigger-previous")
		previousErr = gobuild.Build(src, "./cmd/touba-trigger", previousBin)
	})
	if previousSkip != "" {
		t.Skip(previousSkip)
	}
	if previousErr != nil {
		t.Fatalf("build the previous release: %v", previousErr)
	}
	return previousBin
}

// upgrade is a world whose program the previous release can also read: the
// products debounced (without debounce and /events for the previous
// release), and naps, whose end the test waits for to know that a wake
// loop ran past the gathering's time.
type upgrade struct {
	*world
	prevProgram string
	prev        string // the previous release's binary
}

func newUpgrade(t *testing.T, pg bool) *upgrade {
	t.Helper()
	prev := previousRelease(t)
	var w *world
	if pg {
		w = newPGWorld(t, gathering{window: 2 * time.Second, maxWait: time.Minute, batchSize: 10, batchWindow: time.Second})
	} else {
		w = newWorld(t, gathering{window: 2 * time.Second, maxWait: time.Minute, batchSize: 10, batchWindow: time.Second})
	}
	u := &upgrade{world: w, prevProgram: filepath.Join(w.dir, "previous.air.json"), prev: prev}
	nap := `{"ref": "trigger:g/Naps", "source": {"kind": "webhook"},
	   "steps": [{"id": "nap", "sleep": {"until": {"$ref": "/event/body/until"}}},
	             {"id": "after", "tool": "tool:g/Write", "input": {"key": {"$ref": "/event/body/key"}, "last": 0, "events": []}}]}`
	cur := fmt.Sprintf(`{"air_version": "touba-air-v1", "triggers": [
	  {"ref": %q, "source": {"kind": "webhook"},
	   "debounce": {"key": {"$ref": "/event/body/key"}, "window_ms": 2000, "max_wait_ms": 60000},
	   "steps": [{"id": "sync", "tool": "tool:g/Write",
	              "input": {"key": {"$ref": "/event/body/key"}, "last": {"$ref": "/event/body/seq"}, "events": {"$ref": "/events"}}}]}, %s]}`,
		refProducts, nap)
	old := fmt.Sprintf(`{"air_version": "touba-air-v1", "triggers": [
	  {"ref": %q, "source": {"kind": "webhook"},
	   "steps": [{"id": "sync", "tool": "tool:g/Write",
	              "input": {"key": {"$ref": "/event/body/key"}, "last": {"$ref": "/event/body/seq"}, "events": []}}]}, %s]}`,
		refProducts, nap)
	for path, content := range map[string]string{w.program: cur, u.prevProgram: old} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

// startPrevious runs the previous release (on the files, or as node name
// of the database).
func (u *upgrade) startPrevious(name string) *testkit.Daemon {
	u.t.Helper()
	args := []string{"serve", u.prevProgram, "--manifest", u.manifest, "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--log-level", "info", "--workers", "4"}
	if u.dsn != "" {
		args = append(args, "--database", u.dsn, "--node-id", name, "--lease-ttl", "30s", "--admin-socket", "")
	} else {
		args = append(args, "--queue", u.queue, "--state", u.state, "--effect-journal", u.journal, "--admin-socket", u.sock,
			"--take-over-stale-lock")
	}
	return testkit.StartCmd(u.t, exec.Command(u.prev, args...), []string{"GATHER_HMAC=gather-test-secret"})
}

// napPast posts a nap to d ending at until, and waits for its run to end:
// the wake loop of d ran at until or later.
func (u *upgrade) napPast(d *testkit.Daemon, until time.Time) {
	u.t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.URL()+"/triggers/g/Naps",
		strings.NewReader(fmt.Sprintf(`{"key": "nap", "until": %q}`, until.UTC().Format(time.RFC3339Nano))))
	if err != nil {
		u.t.Fatal(err)
	}
	req.Header.Set("X-Touba-Event-Id", "nap-"+until.Format("150405.000"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		u.t.Fatalf("post the nap: %v %v", resp, err)
	}
	resp.Body.Close()
	u.waitCalls("nap", 1)
}

// leftAlone checks, with the previous release's wake loop past the
// gathering's time, that the carrier still waits and the others are
// merged, and that nothing of the gathering ran. With stopped, no daemon
// of the previous release answers the CLI (its admin API knows no
// gatherings): the carrier's gathering is read too, still open.
func (u *upgrade) leftAlone(carrier string, merged []string, stopped bool) {
	u.t.Helper()
	if e := u.show(carrier); e.Status != "waiting" || stopped && (e.Gathering == nil || e.Gathering.State != "open") {
		u.t.Fatalf("the previous release changed the carrier: %+v", e)
	}
	for _, m := range merged {
		if e := u.show(m); e.Status != "merged" || stopped && e.MergedInto != carrier {
			u.t.Fatalf("the previous release changed merged entry %s: %+v", m, e)
		}
	}
	if c := u.r.forKey("u"); len(c) != 0 {
		u.t.Fatalf("the gathering ran under the previous release: %+v", c)
	}
}

// TestUpgradePreviousReleaseLeavesGatheringsAlone (SQLite): release N+1
// opens a gathering and stops; release N runs on its files past the
// gathering's time, answers a redelivery of a merged entry 200 consumed,
// and changes nothing of it; N+1 again starts it and runs it once, with
// every delivery.
func TestUpgradePreviousReleaseLeavesGatheringsAlone(t *testing.T) {
	t.Parallel()
	u := newUpgrade(t, false)
	u.start("")
	carrier := u.post(refProducts, "u-1", "u", 1)
	merged := []string{u.post(refProducts, "u-2", "u", 2), u.post(refProducts, "u-3", "u", 3)}
	due := time.Now().Add(2 * time.Second)
	u.stop()

	prev := u.startPrevious("")
	u.d = prev
	u.napPast(prev, due.Add(500*time.Millisecond))
	if a, err := u.send(refProducts, "u-2", "u", 2, ""); err != nil || a.Status != http.StatusOK || a.QueueID != merged[0] {
		t.Fatalf("the previous release's answer to a merged entry's redelivery: %+v, %v; want 200 for %s", a, err, merged[0])
	}
	u.leftAlone(carrier, merged, false)
	prev.Signal(syscall.SIGTERM)
	if code := prev.Wait(30 * time.Second); code != 0 {
		t.Fatalf("the previous release's SIGTERM: exit %d\n%s", code, prev.Log())
	}
	u.leftAlone(carrier, merged, true)

	u.start("")
	if c := u.waitCalls("u", 1)[0]; !slices.Equal(c.seqs(), seqs(1, 3)) || c.Input.Events[0].QueueID != carrier {
		t.Fatalf("back on this release, the run saw %v, want 1..3", c.seqs())
	}
	u.stop()
	if calls := u.r.forKey("u"); len(calls) != 1 {
		t.Fatalf("%d runs of the gathering, want 1", len(calls))
	}
}

// TestUpgradePGNodesSideBySide: on one database a node of release N runs
// beside a node of N+1 while N+1's gathering gathers, then alone past its
// time (N+1 stopped): the gathering is left alone; N back out, N+1 back,
// it runs once. (A node of N beside nodes that gather would lease a
// started carrier, a pending entry to it, and run it with its own
// delivery only: docs/gatherings.md says to add debounce once every node
// runs N+1.)
func TestUpgradePGNodesSideBySide(t *testing.T) {
	t.Parallel()
	u := newUpgrade(t, true)
	// The previous release creates the database: one created by this
	// release is partitioned at once (SPEC §8.1), which no older release
	// runs on, whereas one it migrates waits for them (docs/storage.md).
	prev := u.startPrevious("node-old")
	cur := u.node("node-new")
	u.d = cur
	carrier := u.post(refProducts, "u-1", "u", 1)
	merged := []string{u.post(refProducts, "u-2", "u", 2), u.post(refProducts, "u-3", "u", 3)}
	due := time.Now().Add(2 * time.Second)
	cur.Signal(syscall.SIGTERM)
	if code := cur.Wait(30 * time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, cur.Log())
	}
	u.napPast(prev, due.Add(500*time.Millisecond))
	u.leftAlone(carrier, merged, true)
	prev.Signal(syscall.SIGTERM)
	if code := prev.Wait(30 * time.Second); code != 0 {
		t.Fatalf("the previous release's SIGTERM: exit %d\n%s", code, prev.Log())
	}

	u.d = u.node("node-new")
	if c := u.waitCalls("u", 1)[0]; !slices.Equal(c.seqs(), seqs(1, 3)) {
		t.Fatalf("the run saw %v, want 1..3", c.seqs())
	}
	testkit.WaitFor(t, waitLong, func() bool { return u.show(carrier).Status == "done" }, "the carrier done")
	if calls := u.r.forKey("u"); len(calls) != 1 {
		t.Fatalf("%d runs of the gathering, want 1", len(calls))
	}
}
