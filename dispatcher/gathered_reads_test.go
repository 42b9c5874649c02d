package dispatcher_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dispatcher"
)

// Issue 46: round 10's profile put a run's Gathering read at 15 % of the
// daemon's CPU. It came from the benchmark's entries, written into the
// queue without the program digest intake gives every entry: a run reads
// its gathering only when its trigger gathers or the entry was accepted
// under another definition.

// readingGathers counts the dispatcher's Gathering reads.
type readingGathers struct {
	countingGathers
	reads atomic.Int64
}

func (r *readingGathers) Gathering(ctx context.Context, carrier string) (*touba.Gathering, error) {
	r.reads.Add(1)
	return r.countingGathers.Gathering(ctx, carrier)
}

// TestRunOfAnAcceptedEntryReadsNoGathering: an entry accepted through
// intake for a trigger that does not gather, before a restart under the
// same program, costs its run no read of a gathering; one without the
// trigger's digest (accepted under another definition, as far as the run
// can tell) reads it once.
func TestRunOfAnAcceptedEntryReadsNoGathering(t *testing.T) {
	cf := tmp(t, "calls")
	w := newWorld(t, programOf(t, trig("t/plain", nil, toolStep("s", toolW, okInput(cf, 1)))),
		processManifest(t, []string{toolW}), nil, false)
	accepted := w.post("t/plain", `{"k": 1}`)
	// The files closed and opened again, the program read again: a restart.
	w.close()
	w.open()
	r := &readingGathers{countingGathers: countingGathers{WaitStore: w.mustWaits(), gs: any(w.q).(touba.GatherStore)}}
	var _ touba.GatherStore = r // else the dispatcher would read no gathering at all
	w.d = dispatcher.New(w.q, w.st, w.j, w.config(), dispatcher.Options{Workers: 3,
		PollInterval: 10 * time.Millisecond, Log: zerolog.Nop(), Waits: r})
	if err := w.d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.dp.Store(w.d)

	w.wait(accepted, touba.StatusDone)
	if got := r.reads.Load(); got != 0 {
		t.Fatalf("the run of an entry accepted under its trigger's definition read its gathering %d times, want 0", got)
	}

	// Stored without a digest, as the benchmark's prefill did.
	w.wait(w.enqueue("t/plain", `{"k": 2}`, map[string]string{"content-type": "application/json"}), touba.StatusDone)
	if got := r.reads.Load(); got != 1 {
		t.Fatalf("the run of an entry without its trigger's digest read its gathering %d times, want 1", got)
	}
}
