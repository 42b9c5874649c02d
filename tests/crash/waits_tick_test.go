package crash_test

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/trigger"
)

// tickProg is a per-minute schedule that catches up every missed tick;
// each tick writes once, its scheduled_for as input.
type tickProg struct{}

func (tickProg) String() string {
	return `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:crash/Ticks", "source": {"kind": "schedule", "cron": "* * * * *", "catch_up": "all"},
   "steps": [{"id": "write", "tool": "tool:crash/Write", "input": {"tick": {"$ref": "/event/body/scheduled_for"}}}],
   "retry": {"max_attempts": 5, "initial_interval_ms": 50, "max_interval_ms": 200}}]}`
}

const ticksRef = "trigger:crash/Ticks"

// missedTicks is how many minutes before now the seeded tick lies: the
// catch-up at start enqueues that many ticks (one more if a minute
// starts meanwhile).
const missedTicks = 4

// seedTick enqueues the schedule's tick at into a queue with no daemon
// running, as an earlier daemon would have: the catch-up starts after it.
func seedTick(tb testing.TB, path string, at time.Time) string {
	tb.Helper()
	ctx := context.Background()
	q, err := queue.Open(ctx, path, queue.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer q.Close()
	body := trigger.TickBody(at)
	res, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: ticksRef, EventID: trigger.TickEventID(at), Digest: dedupe.Digest(body),
		Body: body, Headers: map[string]string{}, ReceivedAt: at})
	if err != nil || !res.Created {
		tb.Fatalf("seed tick %s: %+v, %v", trigger.TickEventID(at), res, err)
	}
	return res.QueueID
}

// TestWaitCrashAfterTick: a per-minute schedule with catch_up "all" has
// four ticks to catch up; the daemon dies right after enqueueing the
// first. After a restart the catch-up goes on from it: every minute from
// the seeded tick on is exactly one entry, none missed, and each tick's
// write is applied once.
func TestWaitCrashAfterTick(t *testing.T) {
	t.Parallel()
	w := newWaitWorld(t, touba.RetryNone, tickProg{})
	seed := time.Now().UTC().Truncate(time.Minute).Add(-missedTicks * time.Minute)
	seedTick(t, w.queue, seed)

	second := trigger.TickEventID(seed.Add(2 * time.Minute))
	log := w.crashBy(cpAfterTick, 0, "tick "+second+" enqueued", func(entries map[string]*touba.Delivery) bool {
		return entryByEvent(entries, second) != nil
	})
	var ids []string
	for _, e := range w.liveEntries() {
		ids = append(ids, e.EventID)
	}
	sort.Strings(ids)
	if want := []string{trigger.TickEventID(seed), trigger.TickEventID(seed.Add(time.Minute))}; len(ids) != 2 || ids[0] != want[0] || ids[1] != want[1] {
		t.Fatalf("at the crash, the queue holds ticks %v, want %v: the seed and the first tick caught up\n%s", ids, want, log)
	}

	d := w.restart(2)
	last := seed.Add(missedTicks * time.Minute)
	w.waitEntries("the ticks up to "+trigger.TickEventID(last)+" enqueued and run", func(entries map[string]*touba.Delivery) bool {
		return entryByEvent(entries, trigger.TickEventID(last)) != nil && settledEntries(entries)
	})
	stop(t, d)
	checkTicks(t, w.world, seed, w.liveEntries())
}

// checkTicks checks a schedule's entries after a clean stop: their event
// ids are the minutes from seed on with no gap, at least missedTicks of
// them after it, each one entry, done, and (but the seed's, whose write
// may have run before) written once at the remote with its own time.
func checkTicks(t *testing.T, w *world, seed time.Time, entries map[string]*touba.Delivery) {
	t.Helper()
	effects, _ := w.effects()
	writes := map[string][]remoteLine{}
	for _, l := range w.remoteLines() {
		writes[l.EffectID] = append(writes[l.EffectID], l)
	}
	byTick := map[string][]*touba.Delivery{}
	for _, e := range entries {
		if e.TriggerRef == ticksRef {
			byTick[e.EventID] = append(byTick[e.EventID], e)
		}
	}
	n := 0
	for at := seed; ; at = at.Add(time.Minute) {
		id := trigger.TickEventID(at)
		es := byTick[id]
		delete(byTick, id)
		if len(es) == 0 {
			if n <= missedTicks {
				t.Errorf("tick %s has no entry: missed", id)
			}
			break
		}
		n++
		if len(es) > 1 {
			t.Errorf("tick %s is %d entries, want one", id, len(es))
		}
		for _, e := range es {
			eid := effectID(e.QueueID, stepTick)
			if e.Status != touba.StatusDone || effects[eid].State != touba.EffectApplied {
				t.Errorf("tick %s (%s): %s (%s), effect %q; want done, applied", id, e.QueueID, e.Status, e.ErrorCode, effects[eid].State)
			}
			if ls := writes[eid]; len(ls) != 1 || ls[0].Kind != "write" {
				t.Errorf("tick %s: the remote saw %v for %s, want one write", id, ls, eid)
			} else {
				var in struct{ Tick string }
				if json.Unmarshal(ls[0].Input, &in); in.Tick != id {
					t.Errorf("tick %s wrote scheduled_for %q", id, in.Tick)
				}
			}
		}
	}
	for id, es := range byTick {
		t.Errorf("tick %s (%d entries) is not a minute after the seed %s without a gap", id, len(es), trigger.TickEventID(seed))
	}
	if len(entries) != n {
		t.Errorf("the queue holds %d entries, %d of them ticks of the schedule", len(entries), n)
	}
}
