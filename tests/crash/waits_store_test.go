package crash_test

import (
	"context"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// The wait tests read the queue while the daemon runs, to see an entry
// reach waiting or a wait end: the SQLite queue is opened read-only (no
// migration, no write: the file stays the daemon's own), PostgreSQL as an
// onlooker (pgStore).

// withQueue opens the queue read-only (SQLite) or as an onlooker
// (PostgreSQL) and gives fn its entries and its WaitStore (the queue
// store implements it, waits.go).
func (w *world) withQueue(fn func(list func() []*touba.Delivery, waits touba.WaitStore)) {
	w.t.Helper()
	ctx := context.Background()
	var lister interface {
		List(context.Context, touba.EntryFilter) ([]*touba.Delivery, error)
	}
	if w.db != "" {
		st := w.pgStore()
		defer st.Close()
		lister = st.Queue
	} else {
		q, err := queue.Open(ctx, w.queue, queue.Options{ReadOnly: true})
		if err != nil {
			w.t.Fatalf("open the queue read-only: %v", err)
		}
		defer q.Close()
		lister = q
	}
	ws, ok := lister.(touba.WaitStore)
	if !ok {
		w.t.Fatalf("the queue store %T does not implement touba.WaitStore", lister)
	}
	fn(func() []*touba.Delivery {
		all, err := lister.List(ctx, touba.EntryFilter{Limit: 1 << 30})
		if err != nil {
			w.t.Fatalf("list the queue: %v", err)
		}
		return all
	}, ws)
}

// liveEntries reads every entry, by queue id, at any time.
func (w *world) liveEntries() map[string]*touba.Delivery {
	w.t.Helper()
	out := map[string]*touba.Delivery{}
	w.withQueue(func(list func() []*touba.Delivery, _ touba.WaitStore) {
		for _, e := range list() {
			out[e.QueueID] = e
		}
	})
	return out
}

// waitsOf reads the waits of each of qids (its own, not those its
// delivery matched), by queue id and step.
func (w *world) waitsOf(qids ...string) map[string]map[string]touba.Wait {
	w.t.Helper()
	out := map[string]map[string]touba.Wait{}
	w.withQueue(func(_ func() []*touba.Delivery, ws touba.WaitStore) {
		for _, qid := range qids {
			list, err := ws.Waits(context.Background(), qid)
			if err != nil {
				w.t.Fatalf("waits of %s: %v", qid, err)
			}
			out[qid] = map[string]touba.Wait{}
			for _, x := range list {
				if x.QueueID != qid {
					continue // a wait this entry's delivery matched
				}
				if prev, dup := out[qid][x.StepID]; dup {
					w.t.Errorf("entry %s has two waits of step %s: %+v and %+v", qid, x.StepID, prev, x)
				}
				out[qid][x.StepID] = x
			}
		}
	})
	return out
}

// waitString is a wait in a failure message.
func waitString(x touba.Wait) string {
	s := fmt.Sprintf("{%s %s %s", x.StepID, x.Kind, x.State)
	if x.MatchedQueueID != "" {
		s += " matched " + x.MatchedQueueID
	}
	if x.WakeAt != nil {
		s += " wake_at " + touba.FormatTime(*x.WakeAt)
	}
	if x.ResolvedAt != nil {
		s += " resolved " + touba.FormatTime(*x.ResolvedAt)
	}
	return s + "}"
}
