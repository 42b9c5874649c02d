package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// deferStore opens node-a on a fresh database, with a clock that moves a
// millisecond at every reading: each d.now() is a distinct timestamp, so
// rows of different operations sharing one were written by one statement
// (a flush), never by single-row statements, which read the clock each.
func deferStore(t *testing.T) (*Store, string) {
	t.Helper()
	url := pgtest.New(t)
	return openDeferStore(t, url, "node-a"), url
}

func openDeferStore(t *testing.T, url, node string) *Store {
	t.Helper()
	base := time.Now()
	var ticks atomic.Int64
	st, err := Open(context.Background(), Config{URL: url, NodeID: node,
		Now: func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// leaseAll enqueues n entries of trigger t and leases them all.
func leaseAll(t *testing.T, st *Store, n int) []*touba.Delivery {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		d := &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("e-%d", i), Digest: "d", Body: []byte(`{}`)}
		if _, err := st.Queue.Enqueue(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.Queue.Lease(ctx, n)
	if err != nil || len(got) != n {
		t.Fatalf("lease: %d entries, %v; want %d", len(got), err, n)
	}
	return got
}

// pdOf is an in-process prepare (LeaseToken set) of d's effect "s".
func pdOf(d *touba.Delivery, call string) touba.EffectPrepare {
	return touba.EffectPrepare{Scope: d.QueueID, EffectID: d.QueueID + ":s", ToolRef: "tool:t/T", Operation: touba.OperationInvoke,
		Fingerprint: "sha256:00ff", RetryMode: touba.RetryIdempotencyKey, CallID: call, LeaseToken: d.LeaseToken}
}

func applied(d *touba.Delivery, call string, i int) touba.EffectOutcome {
	return touba.EffectOutcome{Scope: d.QueueID, EffectID: d.QueueID + ":s", CallID: call, State: touba.EffectApplied,
		ReceiptRef: fmt.Sprintf("R-%d", i), Result: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
}

// atOnce runs fn(0..n-1) each in its own goroutine, all released at
// once so that their operations meet in the writers' batches.
func atOnce(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = fn(i)
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

func eventStates(t *testing.T, st *Store, scope, effectID string) []string {
	t.Helper()
	evs, err := st.Journal.Events(context.Background(), scope, effectID)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range evs {
		out = append(out, e.State)
	}
	return out
}

func getEntry(t *testing.T, st *Store, queueID string) *touba.Delivery {
	t.Helper()
	d, err := st.Queue.Get(context.Background(), queueID)
	if err != nil || d == nil {
		t.Fatalf("entry %s: %v, %v", queueID, d, err)
	}
	return d
}

// steal gives the entries a new lease token, as a take-over by another
// node would, behind the writers' backs.
func steal(t *testing.T, st *Store, ds []*touba.Delivery, idx ...int) {
	t.Helper()
	var ids []string
	for _, i := range idx {
		ids = append(ids, ds[i].QueueID)
	}
	tag, err := st.db.pool.Exec(context.Background(),
		`UPDATE touba.entries SET lease_token = nextval('touba.lease_tokens') WHERE queue_id = ANY($1)`, ids)
	if err != nil || tag.RowsAffected() != int64(len(ids)) {
		t.Fatalf("steal %v: %v, %v", ids, tag, err)
	}
}

func counts(st *Store) (rows, slow int64) {
	return st.db.deferred.rows.Load(), st.db.deferred.slow.Load()
}

// TestDeferredBatchOfManyRuns: 64 runs at once, each dispatching one
// effect, recording its outcome and ending its entry, all through the
// deferred multi-row statements (none took the slow path), write what the
// single-row statements would: every effect applied with its audit trail
// in order, every entry done; and the flushes carried several rows each.
func TestDeferredBatchOfManyRuns(t *testing.T) {
	const n = 64
	ctx := context.Background()
	st, _ := deferStore(t)
	ds := leaseAll(t, st, n)
	rows0, slow0 := counts(st)
	commits0 := st.db.stats().Commits

	errs := atOnce(n, func(i int) error {
		d := ds[i]
		if e, err := st.Journal.PrepareDispatched(ctx, pdOf(d, "c")); err != nil {
			return fmt.Errorf("prepare: %w", err)
		} else if e.State != touba.EffectDispatched || e.Attempts != 1 {
			return fmt.Errorf("prepare returned %s attempt %d, want dispatched attempt 1", e.State, e.Attempts)
		}
		if err := st.Journal.Finish(ctx, applied(d, "c", i)); err != nil {
			return fmt.Errorf("finish effect: %w", err)
		}
		if err := st.Queue.Finish(ctx, d.QueueID, d.LeaseToken, touba.StatusDone, "", ""); err != nil {
			return fmt.Errorf("finish entry: %w", err)
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("run %d: %v", i, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	created, updated := map[time.Time]int{}, map[time.Time]int{}
	for i, d := range ds {
		e, err := st.Journal.Get(ctx, d.QueueID, d.QueueID+":s")
		if err != nil || e == nil {
			t.Fatalf("effect %d: %v, %v", i, e, err)
		}
		if e.State != touba.EffectApplied || e.Attempts != 1 || e.CallID != "c" || e.ReceiptRef != fmt.Sprintf("R-%d", i) ||
			string(e.Result) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Errorf("effect %d stored %+v, want applied attempt 1 by c, receipt R-%d", i, e, i)
		}
		if s := eventStates(t, st, d.QueueID, d.QueueID+":s"); !slices.Equal(s, []string{"prepared", "dispatched", "applied"}) {
			t.Errorf("effect %d events %v, want [prepared dispatched applied]", i, s)
		}
		if got := getEntry(t, st, d.QueueID); got.Status != touba.StatusDone {
			t.Errorf("entry %d is %s, want done", i, got.Status)
		}
		created[e.CreatedAt]++
		updated[e.UpdatedAt]++
	}
	rows, slow := counts(st)
	if rows-rows0 < 3*n {
		t.Errorf("%d rows deferred, want at least %d", rows-rows0, 3*n)
	}
	if slow != slow0 {
		t.Errorf("%d rows took the slow path, want 0", slow-slow0)
	}
	// Distinct timestamps (deferStore's clock): fewer than n means one
	// statement wrote several effects.
	t.Logf("%d rows in %d commits; %d distinct dispatch times, %d distinct outcome times for %d effects",
		rows-rows0, st.db.stats().Commits-commits0, len(created), len(updated), n)
	if len(created) == n && len(updated) == n {
		t.Errorf("every flush carried one row: no two effects share a dispatch or an outcome statement")
	}
}

// TestDeferredLeaseLostFailsOnlyItself: in batches shared with runs whose
// lease holds, a run whose entry was leased meanwhile under another token
// fails alone, with LeaseLost, and writes what its single-row path writes:
// no effect on a prepare, only a late_outcome event on an outcome, nothing
// on an entry's end; the others' rows are written.
func TestDeferredLeaseLostFailsOnlyItself(t *testing.T) {
	const n = 12
	ctx := context.Background()
	st, _ := deferStore(t)
	ds := leaseAll(t, st, n)
	effect := func(i int) string { return ds[i].QueueID + ":s" }

	// Prepares: 0, 3, 6, 9 were taken over before.
	lostPrep := map[int]bool{0: true, 3: true, 6: true, 9: true}
	steal(t, st, ds, 0, 3, 6, 9)
	_, slow0 := counts(st)
	errs := atOnce(n, func(i int) error { _, err := st.Journal.PrepareDispatched(ctx, pdOf(ds[i], "c")); return err })
	for i, err := range errs {
		e, gerr := st.Journal.Get(ctx, ds[i].QueueID, effect(i))
		if gerr != nil {
			t.Fatal(gerr)
		}
		evs := eventStates(t, st, ds[i].QueueID, effect(i))
		switch {
		case lostPrep[i] && touba.ErrorCode(err) != touba.ELeaseLost:
			t.Errorf("prepare %d under a lost lease: %v, want LeaseLost", i, err)
		case lostPrep[i] && (e != nil || len(evs) != 0):
			t.Errorf("prepare %d under a lost lease wrote effect %+v, events %v", i, e, evs)
		case !lostPrep[i] && err != nil:
			t.Errorf("prepare %d: %v", i, err)
		case !lostPrep[i] && (e == nil || e.State != touba.EffectDispatched || !slices.Equal(evs, []string{"prepared", "dispatched"})):
			t.Errorf("prepare %d stored %+v, events %v; want dispatched, [prepared dispatched]", i, e, evs)
		}
	}
	if _, slow := counts(st); slow-slow0 != int64(len(lostPrep)) {
		t.Errorf("prepares: %d rows took the slow path, want %d", slow-slow0, len(lostPrep))
	}
	if t.Failed() {
		t.FailNow()
	}

	// Outcomes: 1 and 7 were taken over while their calls ran.
	var live []int
	for i := range n {
		if !lostPrep[i] {
			live = append(live, i)
		}
	}
	lostOut := map[int]bool{1: true, 7: true}
	steal(t, st, ds, 1, 7)
	_, slow0 = counts(st)
	errs = atOnce(len(live), func(k int) error { return st.Journal.Finish(ctx, applied(ds[live[k]], "c", live[k])) })
	for k, err := range errs {
		i := live[k]
		e, gerr := st.Journal.Get(ctx, ds[i].QueueID, effect(i))
		if gerr != nil || e == nil {
			t.Fatalf("effect %d: %v, %v", i, e, gerr)
		}
		evs := eventStates(t, st, ds[i].QueueID, effect(i))
		switch {
		case lostOut[i] && touba.ErrorCode(err) != touba.ELeaseLost:
			t.Errorf("outcome %d under a lost lease: %v, want LeaseLost", i, err)
		case lostOut[i] && (e.State != touba.EffectDispatched || !slices.Equal(evs, []string{"prepared", "dispatched", "late_outcome"})):
			t.Errorf("outcome %d under a lost lease: stored %s, events %v; want dispatched, [prepared dispatched late_outcome]", i, e.State, evs)
		case !lostOut[i] && err != nil:
			t.Errorf("outcome %d: %v", i, err)
		case !lostOut[i] && (e.State != touba.EffectApplied || !slices.Equal(evs, []string{"prepared", "dispatched", "applied"})):
			t.Errorf("outcome %d: stored %s, events %v; want applied, [prepared dispatched applied]", i, e.State, evs)
		}
	}
	if _, slow := counts(st); slow-slow0 != int64(len(lostOut)) {
		t.Errorf("outcomes: %d rows took the slow path, want %d", slow-slow0, len(lostOut))
	}
	for i := range lostOut {
		evs, err := st.Journal.Events(ctx, ds[i].QueueID, effect(i))
		if err != nil || len(evs) != 3 || !strings.Contains(evs[2].Detail, "effect.late_outcome") {
			t.Errorf("effect %d: %d events, %v; want the third's detail to tell effect.late_outcome", i, len(evs), err)
		}
	}

	// Ends: every entry taken over is ended with the token it was leased
	// under first, now the wrong one.
	before := map[int]*touba.Delivery{}
	for i := range n {
		if lostPrep[i] || lostOut[i] {
			before[i] = getEntry(t, st, ds[i].QueueID)
		}
	}
	_, slow0 = counts(st)
	errs = atOnce(n, func(i int) error {
		return st.Queue.Finish(ctx, ds[i].QueueID, ds[i].LeaseToken, touba.StatusDone, "", "")
	})
	for i, err := range errs {
		got := getEntry(t, st, ds[i].QueueID)
		if b := before[i]; b != nil {
			if touba.ErrorCode(err) != touba.ELeaseLost {
				t.Errorf("end %d under a wrong token: %v, want LeaseLost", i, err)
			}
			if got.Status != touba.StatusRunning || got.LeaseToken != b.LeaseToken || !got.UpdatedAt.Equal(b.UpdatedAt) {
				t.Errorf("end %d under a wrong token changed the entry: %s token %d at %v, was %s token %d at %v",
					i, got.Status, got.LeaseToken, got.UpdatedAt, b.Status, b.LeaseToken, b.UpdatedAt)
			}
		} else if err != nil || got.Status != touba.StatusDone {
			t.Errorf("end %d: %v, entry %s; want done", i, err, got.Status)
		}
	}
	if _, slow := counts(st); slow == slow0 {
		t.Errorf("ends: no row took the slow path")
	}
}

// TestDeferredPrepareOfExistingIdentity: a PrepareDispatched of an identity
// already journaled, in a batch of its own under the same lease, leaves
// the multi-row statement (its row is not written there: slow path) and
// answers as PrepareDispatched's single-row path does: a new attempt where
// the stored state allows one, else its refusal with the stored effect.
func TestDeferredPrepareOfExistingIdentity(t *testing.T) {
	ctx := context.Background()
	st, url := deferStore(t)
	other := openDeferStore(t, url, "node-b") // another journal handle
	ds := leaseAll(t, st, 8)                  // one per case, and the last
	finish := func(d *touba.Delivery, call, state string) {
		t.Helper()
		o := touba.EffectOutcome{Scope: d.QueueID, EffectID: d.QueueID + ":s", CallID: call, State: state, ReceiptRef: "R"}
		if err := st.Journal.Finish(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	prepared := func(p touba.EffectPrepare, dispatched bool) {
		t.Helper()
		var err error
		if dispatched {
			_, err = st.Journal.PrepareDispatched(ctx, p)
		} else {
			_, err = st.Journal.Prepare(ctx, p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	noneMode := func(p touba.EffectPrepare) touba.EffectPrepare { p.RetryMode = touba.RetryNone; return p }
	otherPrint := func(p touba.EffectPrepare) touba.EffectPrepare { p.Fingerprint = "sha256:0f0f"; return p }

	for _, c := range []struct {
		name  string
		setup func(d *touba.Delivery)
		by    *Store
		again func(p touba.EffectPrepare) touba.EffectPrepare
		check func(err error) bool
		want  string // wanted answer
		state string // stored and returned
		tries int    // stored attempts
		evs   []string
	}{
		{name: "applied", setup: func(d *touba.Delivery) { prepared(pdOf(d, "c1"), true); finish(d, "c1", touba.EffectApplied) },
			check: func(err error) bool { return errors.Is(err, touba.ErrEffectApplied) }, want: "EffectApplied",
			state: touba.EffectApplied, tries: 1, evs: []string{"prepared", "dispatched", "applied"}},
		{name: "not applied", setup: func(d *touba.Delivery) { prepared(pdOf(d, "c1"), false); finish(d, "c1", touba.EffectNotApplied) },
			check: func(err error) bool { return err == nil }, want: "a new attempt",
			state: touba.EffectDispatched, tries: 2, evs: []string{"prepared", "not_applied", "prepared", "dispatched"}},
		{name: "unknown, key", setup: func(d *touba.Delivery) { prepared(pdOf(d, "c1"), true); finish(d, "c1", touba.EffectUnknown) },
			check: func(err error) bool { return err == nil }, want: "a new attempt",
			state: touba.EffectDispatched, tries: 2, evs: []string{"prepared", "dispatched", "unknown", "prepared", "dispatched"}},
		{name: "unknown, none", setup: func(d *touba.Delivery) { prepared(pdOf(d, "c1"), true); finish(d, "c1", touba.EffectUnknown) },
			again: noneMode, check: func(err error) bool { return touba.ErrorCode(err) == touba.EEffectOutcomeUnknown },
			want: touba.EEffectOutcomeUnknown, state: touba.EffectUnknown, tries: 1, evs: []string{"prepared", "dispatched", "unknown"}},
		{name: "other fingerprint", setup: func(d *touba.Delivery) { prepared(pdOf(d, "c1"), false); finish(d, "c1", touba.EffectNotApplied) },
			again: otherPrint, check: func(err error) bool { return touba.ErrorCode(err) == touba.EEffectRequestConflict },
			want: touba.EEffectRequestConflict, state: touba.EffectNotApplied, tries: 1, evs: []string{"prepared", "not_applied"}},
		{name: "dispatched by another handle", setup: func(d *touba.Delivery) { prepared(pdOf(d, "c1"), true) }, by: other,
			check: func(err error) bool { return touba.ErrorCode(err) == touba.EEffectInProgress }, want: touba.EEffectInProgress,
			state: touba.EffectDispatched, tries: 1, evs: []string{"prepared", "dispatched"}},
		{name: "prepared by another handle", setup: func(d *touba.Delivery) { prepared(pdOf(d, "c1"), false) }, by: other,
			check: func(err error) bool { return touba.ErrorCode(err) == touba.EEffectInProgress }, want: touba.EEffectInProgress,
			state: touba.EffectPrepared, tries: 1, evs: []string{"prepared"}},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			d := ds[0]
			ds = ds[1:]
			c.setup(d)
			by := st
			if c.by != nil {
				by = c.by
			}
			p := pdOf(d, "c2")
			if c.again != nil {
				p = c.again(p)
			}
			rows0, slow0 := counts(by)
			e, err := by.Journal.PrepareDispatched(ctx, p)
			if !c.check(err) {
				t.Fatalf("prepare again: %v, want %s", err, c.want)
			}
			if rows, slow := counts(by); rows-rows0 != 1 || slow-slow0 != 1 {
				t.Errorf("%d rows deferred, %d took the slow path; want 1 and 1", rows-rows0, slow-slow0)
			}
			got, gerr := st.Journal.Get(ctx, d.QueueID, d.QueueID+":s")
			if gerr != nil || got == nil {
				t.Fatalf("stored: %v, %v", got, gerr)
			}
			if e == nil || e.State != c.state || got.State != c.state || got.Attempts != c.tries {
				t.Errorf("returned %+v, stored %s attempt %d; want %s attempt %d", e, got.State, got.Attempts, c.state, c.tries)
			}
			if s := eventStates(t, st, d.QueueID, d.QueueID+":s"); !slices.Equal(s, c.evs) {
				t.Errorf("events %v, want %v", s, c.evs)
			}
		})
	}

	// The identity's call still holds it in this process: refused before
	// any batch, as before.
	d := ds[0]
	prepared(pdOf(d, "c1"), true)
	rows0, _ := counts(st)
	if _, err := st.Journal.PrepareDispatched(ctx, pdOf(d, "c2")); touba.ErrorCode(err) != touba.EEffectInProgress {
		t.Fatalf("prepare while c1 holds it: %v, want EffectInProgress", err)
	}
	if rows, _ := counts(st); rows != rows0 {
		t.Errorf("a prepare refused in process reached a batch")
	}
}

// TestDeferredEndReleasesKey: a keyed entry's end, deferred to the batch's
// multi-row statement, still lets its key's next entry go (held no more,
// leasable), unless it ends parked (a parked entry keeps its key).
func TestDeferredEndReleasesKey(t *testing.T) {
	const keys = 6
	ctx := context.Background()
	st, _ := deferStore(t)
	for k := range keys {
		for seq := range 2 {
			if _, err := st.Queue.Enqueue(ctx, keyed("t", fmt.Sprintf("k%d", k), seq)); err != nil {
				t.Fatal(err)
			}
		}
	}
	firsts, err := st.Queue.Lease(ctx, 2*keys)
	if err != nil || len(firsts) != keys {
		t.Fatalf("lease: %d entries, %v; want the %d keys' first", len(firsts), err, keys)
	}
	status := func(d *touba.Delivery) string {
		switch d.ConcKey {
		case "k4":
			return touba.StatusFailed
		case "k5":
			return touba.StatusParked
		}
		return touba.StatusDone
	}
	rows0, slow0 := counts(st)
	errs := atOnce(keys, func(i int) error {
		d := firsts[i]
		code := ""
		if status(d) == touba.StatusFailed {
			code = "Remote"
		}
		return st.Queue.Finish(ctx, d.QueueID, d.LeaseToken, status(d), code, "")
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("end %s: %v", firsts[i].EventID, err)
		}
	}
	if rows, slow := counts(st); rows-rows0 != keys || slow != slow0 {
		t.Errorf("%d rows deferred, %d took the slow path; want %d and 0", rows-rows0, slow-slow0, keys)
	}
	next, err := st.Queue.Lease(ctx, 2*keys)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range next {
		got = append(got, d.EventID)
	}
	slices.Sort(got)
	if want := []string{"k0-1", "k1-1", "k2-1", "k3-1", "k4-1"}; !slices.Equal(got, want) {
		t.Fatalf("leased %v after the ends, want %v (k5's first is parked and keeps its key)", got, want)
	}
}
