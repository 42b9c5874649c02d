package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

// TestQueueResume: `queue resume` through the daemon: refusals with
// did-you-mean, --new-effects refused off a terminal without --yes, asked
// (y/N) on one, and the JSON answer naming the steps and their effect
// identities.
func TestQueueResume(t *testing.T) {
	e := newOpEnv(t, opProgram, opManifest)
	os.WriteFile(e.marker, []byte("no dying here"), 0o600) // the charge answers at once
	d := e.start(t)
	status, q := testkit.Post(t, d.URL()+"/triggers/ops/Orders", "order-r", `{"order_id": 11}`)
	if status != 202 {
		t.Fatalf("post: %d", status)
	}
	testkit.WaitFor(t, opWait, func() bool { return e.entryStatus(t, q) == "done" }, "the run to finish")

	// Usage: the verb and the step are suggested; --from is required.
	if code, _, errs := e.cli(t, "queue", "resum", q); code != 2 || !strings.Contains(errs, `did you mean "resume"?`) {
		t.Fatalf("queue resum: exit %d\n%s", code, errs)
	}
	if code, _, errs := e.cli(t, "queue", "resume", q); code != 2 || !strings.HasPrefix(errs, "UsageInvalid: ") || !strings.Contains(errs, "--from STEP") {
		t.Fatalf("resume without --from: exit %d\n%s", code, errs)
	}
	if code, _, errs := e.cli(t, "queue", "resume", q, "--from", "notfy"); code != 1 || !strings.HasPrefix(errs, "EntryNotResumable: ") ||
		!strings.Contains(errs, "did you mean --from notify?") {
		t.Fatalf("resume from a step the trigger lacks: exit %d\n%s", code, errs)
	}
	if code, _, errs := e.cli(t, "queue", "resume", q, "--form", "notify"); code != 2 || !strings.Contains(errs, "did you mean --from?") {
		t.Fatalf("resume --form: exit %d\n%s", code, errs)
	}
	if code, _, errs := e.cli(t, "queue", "resume", "-h"); code != 0 || !strings.Contains(errs, "-new-effects") || !strings.Contains(errs, "-yes") {
		t.Fatalf("resume -h: exit %d\n%s", code, errs)
	}
	// Off a terminal, new effects need --yes, and nothing is touched.
	if code, _, errs := e.cli(t, "queue", "resume", q, "--from", "notify", "--new-effects"); code != 2 ||
		!strings.HasPrefix(errs, "UsageInvalid: ") || !strings.Contains(errs, "--yes") || !strings.Contains(errs, "writes happen again") {
		t.Fatalf("--new-effects off a terminal: exit %d\n%s", code, errs)
	}
	if got := e.entryStatus(t, q); got != "done" {
		t.Fatalf("after the refusals: %s", got)
	}

	// Without new effects: at once, same identities.
	var rep struct {
		QueueID   string            `json:"queue_id"`
		From      string            `json:"from"`
		Steps     []string          `json:"steps"`
		Left      string            `json:"left"`
		Status    string            `json:"status"`
		EffectIDs map[string]string `json:"effect_ids"`
	}
	e.cliJSON(t, &rep, "queue", "resume", q, "--from", "notify", "--reason", "resend the mail")
	if rep.QueueID != q || rep.Left != "done" || rep.Status != "pending" || len(rep.Steps) != 1 || rep.Steps[0] != "notify" ||
		rep.EffectIDs["notify"] != q+":notify" {
		t.Fatalf("resume --json: %+v", rep)
	}
	testkit.WaitFor(t, opWait, func() bool { return e.entryStatus(t, q) == "done" }, "the resumed run to finish")
	if code, out, errs := e.cli(t, "queue", "show", q); code != 0 || !strings.Contains(out, "queue.resume") || !strings.Contains(out, "resend the mail") {
		t.Fatalf("queue show after resume: exit %d\n%s%s", code, out, errs)
	}

	// On a terminal: the warning, then the question; "n" changes nothing.
	code, out, errs := e.cliTTY(t, "n\n", "queue", "resume", q, "--from", "notify", "--new-effects")
	if code != 2 || !strings.Contains(errs, "steps notify get new effect identities, so their writes happen again") ||
		!strings.Contains(errs, q+":notify#1") || !strings.Contains(errs, "[y/N]") || !strings.Contains(errs, "not confirmed") {
		t.Fatalf("declined resume: exit %d\n%s%s", code, out, errs)
	}
	if got := e.entryStatus(t, q); got != "done" {
		t.Fatalf("after a declined resume: %s", got)
	}
	code, out, errs = e.cliTTY(t, "y\n", "queue", "resume", q, "--from", "notify", "--new-effects", "--reason", "mail lost")
	if code != 0 || !strings.Contains(out, "resumed from notify: done -> pending") || !strings.Contains(out, q+":notify#1") {
		t.Fatalf("confirmed resume: exit %d\n%s%s", code, out, errs)
	}
	testkit.WaitFor(t, opWait, func() bool { return e.entryStatus(t, q) == "done" }, "the run with new effects to finish")
	// --yes: no question, the next generation.
	e.cliJSON(t, &rep, "queue", "resume", q, "--from", "charge", "--new-effects", "--yes")
	if len(rep.Steps) != 2 || rep.EffectIDs["charge"] != q+":charge#1" || rep.EffectIDs["notify"] != q+":notify#2" {
		t.Fatalf("resume --new-effects --yes: %+v", rep)
	}
	testkit.WaitFor(t, opWait, func() bool { return e.entryStatus(t, q) == "done" }, "the last run to finish")
}

// cliTTY runs one operator command with a terminal as its stdin, on
// which input is typed.
func (e *opEnv) cliTTY(tb testing.TB, input string, args ...string) (int, string, string) {
	tb.Helper()
	ptmx, tty := openPTY(tb)
	cmd := exec.Command(testkit.Binary(tb), append(args, e.fileFlags(args[0])...)...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, &out, &errb
	if _, err := ptmx.Write([]byte(input)); err != nil {
		tb.Fatal(err)
	}
	cmd.Run()
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// openPTY opens a pseudo-terminal pair; the test is skipped where the
// host has none.
func openPTY(tb testing.TB) (ptmx, tty *os.File) {
	tb.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		tb.Skipf("no pseudo-terminal: %v", err)
	}
	tb.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		tb.Skipf("unlock pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		tb.Skipf("pseudo-terminal number: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		tb.Skipf("open pseudo-terminal: %v", err)
	}
	tb.Cleanup(func() { tty.Close() })
	return ptmx, tty
}

// TestQueueShowWaitsAndResumeOnFiles: with no daemon, `queue ls --status
// waiting` shows when entries wake, `queue show` prints the program and
// the waits of both sides, and `queue resume` checks the step against the
// definition the entry was accepted under.
func TestQueueShowWaitsAndResumeOnFiles(t *testing.T) {
	e := newOpEnv(t, opProgram, opManifest)
	ctx := context.Background()
	q, err := queue.Open(ctx, e.queue, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, open := range []func() error{
		func() error {
			s, err := state.Open(ctx, e.state, state.Options{})
			if err == nil {
				s.Close()
			}
			return err
		},
		func() error {
			j, err := journal.Open(ctx, e.journal, journal.Options{})
			if err == nil {
				j.Close()
			}
			return err
		},
	} {
		if err := open(); err != nil {
			t.Fatal(err)
		}
	}
	const def = `{"ref":"trigger:ops/Orders","steps":[{"id":"charge","tool":"tool:ops/Charge"},` +
		`{"id":"paid","wait_for":{"trigger":"trigger:ops/Paid","on":"/body/order","timeout_ms":60000}},{"id":"notify","tool":"tool:ops/Notify"}]}`
	const digest = "sha256:abcdef0123456789abcdef"
	if err := q.SaveProgram(ctx, digest, []byte(def)); err != nil {
		t.Fatal(err)
	}
	enqueue := func(ref, id, body string, offers []touba.MatchValue) string {
		r, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: ref, EventID: id, Digest: dedupe.Digest([]byte(body)), Body: []byte(body),
			ProgramDigest: digest, Offers: offers})
		if err != nil || !r.Created {
			t.Fatalf("enqueue %s: %v %+v", id, err, r)
		}
		return r.QueueID
	}
	waiter := enqueue("trigger:ops/Orders", "o-1", `{"id":"o-1"}`, nil)
	leased, err := q.Lease(ctx, 1)
	if err != nil || len(leased) != 1 {
		t.Fatalf("lease: %v %+v", err, leased)
	}
	wake := time.Now().Add(time.Hour)
	key := touba.WaitKey("trigger:ops/Orders", "paid")
	if _, err := q.BeginWait(ctx, leased[0].LeaseToken, touba.Wait{QueueID: waiter, StepID: "paid", Kind: touba.WaitEvent, Key: key,
		Value: `"o-1"`, WakeAt: &wake}); err != nil {
		t.Fatal(err)
	}
	q.Close()

	code, out, errs := e.cli(t, "queue", "ls", "--status", "waiting")
	if code != 0 || !strings.Contains(out, "WAKE") || !strings.Contains(out, waiter) || !strings.Contains(out, touba.FormatTime(wake)) {
		t.Fatalf("queue ls --status waiting: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = e.cli(t, "queue", "show", waiter)
	for _, want := range []string{"status       waiting", "program      abcdef012345", "wakes        " + touba.FormatTime(wake),
		"waits (1)", "a delivery of trigger:ops/Paid with \"o-1\" at /body/order", "(then fail)", "waiting in step paid"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("queue show of a waiting entry lacks %q: exit %d\n%s%s", want, code, out, errs)
		}
	}
	if code, _, errs := e.cli(t, "queue", "resume", waiter, "--from", "paid"); code != 1 || !strings.Contains(errs, "EntryNotResumable: ") ||
		!strings.Contains(errs, "is waiting") {
		t.Fatalf("resume of a waiting entry: exit %d\n%s", code, errs)
	}

	// The awaited delivery comes; both sides say so.
	if q, err = queue.Open(ctx, e.queue, queue.Options{}); err != nil {
		t.Fatal(err)
	}
	pay := enqueue("trigger:ops/Paid", "p-1", `{"order":"o-1"}`, []touba.MatchValue{{Key: key, Value: `"o-1"`}})
	q.Close()
	if code, out, _ = e.cli(t, "queue", "show", waiter); code != 0 || !strings.Contains(out, "matched") || !strings.Contains(out, pay) {
		t.Fatalf("queue show of the matched waiter: exit %d\n%s", code, out)
	}
	var shown struct {
		MatchedWaits []struct {
			QueueID string `json:"queue_id"`
			StepID  string `json:"step_id"`
		} `json:"matched_waits"`
	}
	e.cliJSON(t, &shown, "queue", "show", pay)
	if len(shown.MatchedWaits) != 1 || shown.MatchedWaits[0].QueueID != waiter || shown.MatchedWaits[0].StepID != "paid" {
		t.Fatalf("queue show --json of the matching delivery: %+v", shown)
	}
	if code, out, _ = e.cli(t, "queue", "show", pay); code != 0 || !strings.Contains(out, "this delivery matched the wait paid of "+waiter) ||
		strings.Contains(out, "waits (0)") {
		t.Fatalf("queue show of the matching delivery:\n%s", out)
	}

	// The waiter fails later on; resumed from paid on the files, it is
	// checked against its pinned definition and its wait is gone.
	if q, err = queue.Open(ctx, e.queue, queue.Options{}); err != nil {
		t.Fatal(err)
	}
	if leased, err = q.Lease(ctx, 1); err != nil || len(leased) != 1 || leased[0].QueueID != waiter {
		t.Fatalf("lease the woken waiter: %v %+v", err, leased)
	}
	if err := q.Finish(ctx, waiter, leased[0].LeaseToken, touba.StatusFailed, touba.EHandlerFailed, "notify down"); err != nil {
		t.Fatal(err)
	}
	q.Close()
	var rep struct {
		Steps   []string `json:"steps"`
		Left    string   `json:"left"`
		Against string   `json:"checked_against"`
	}
	e.cliJSON(t, &rep, "queue", "resume", waiter, "--from", "paid", "--reason", "wait again")
	if len(rep.Steps) != 2 || rep.Steps[0] != "paid" || rep.Left != "failed" || !strings.Contains(rep.Against, "accepted under") {
		t.Fatalf("resume on the files: %+v", rep)
	}
	if code, out, _ = e.cli(t, "queue", "show", waiter); code != 0 || strings.Contains(out, "waits (") || !strings.Contains(out, "status       pending") {
		t.Fatalf("queue show after the resume from paid:\n%s", out)
	}
}
