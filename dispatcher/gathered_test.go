package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/testkit"
)

// Issue 43: a carrier's run read every merged body and parsed them all into
// /events as soon as any $ref resolved, even when no step read /events. A
// run reads of its gathering what its steps name: nothing for steps that
// read neither /event nor /events, the last delivery for /event, every
// delivery once for /events.

// countingGathers is the queue as the dispatcher's wait and gather store,
// counting the merged bodies the dispatcher reads from it.
type countingGathers struct {
	touba.WaitStore
	gs     touba.GatherStore
	bodies atomic.Int64
}

func (c *countingGathers) count(d *touba.Delivery) {
	if d != nil && d.Body != nil {
		c.bodies.Add(1)
	}
}

func (c *countingGathers) StartDue(ctx context.Context, now time.Time, limit int) (int64, error) {
	return c.gs.StartDue(ctx, now, limit)
}

func (c *countingGathers) Gathering(ctx context.Context, carrier string) (*touba.Gathering, error) {
	return c.gs.Gathering(ctx, carrier)
}

func (c *countingGathers) Gathered(ctx context.Context, carrier string) ([]*touba.Delivery, error) {
	list, err := c.gs.Gathered(ctx, carrier)
	for _, d := range list {
		c.count(d)
	}
	return list, err
}

func (c *countingGathers) GatheredAt(ctx context.Context, carrier string, seq int) (*touba.Delivery, error) {
	d, err := c.gs.GatheredAt(ctx, carrier, seq)
	c.count(d)
	return d, err
}

func (c *countingGathers) EachGathered(ctx context.Context, carrier string, fn func(*touba.Delivery) error) error {
	return c.gs.EachGathered(ctx, carrier, func(d *touba.Delivery) error {
		c.count(d)
		return fn(d)
	})
}

func (c *countingGathers) GatherCounts(ctx context.Context) (open, merged int64, err error) {
	return c.gs.GatherCounts(ctx)
}

// gatherWorld is a world whose trigger t/gath batches 4 deliveries of a
// key into one run of one step with input, its dispatcher reading
// gatherings through a countingGathers.
func gatherWorld(t *testing.T, input any) (*world, *countingGathers) {
	t.Helper()
	tr := trig("t/gath", nil, toolStep("s", toolW, input))
	tr["batch"] = map[string]any{"key": ref("/event/body/k"), "max_size": 4, "window_ms": 600000}
	w := newWorld(t, programOf(t, tr), processManifest(t, []string{toolW}), nil, false)
	c := &countingGathers{WaitStore: w.mustWaits(), gs: any(w.q).(touba.GatherStore)}
	var _ touba.GatherStore = c // else the dispatcher would read no gathering at all
	w.d = dispatcher.New(w.q, w.st, w.j, w.config(), dispatcher.Options{Workers: 3,
		PollInterval: 10 * time.Millisecond, Log: zerolog.Nop(), Waits: c})
	if err := w.d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.dp.Store(w.d)
	return w, c
}

// runGathering posts 4 deliveries of one key (the batch fills and starts)
// and returns the carrier's queue id and the one call its run made.
func runGathering(t *testing.T, w *world, callsFile string) (string, call) {
	t.Helper()
	var carrier string
	for i := 1; i <= 4; i++ {
		qid := w.post("t/gath", fmt.Sprintf(`{"k": "a", "seq": %d, "pad": "%0100d"}`, i, i))
		if i == 1 {
			carrier = qid
		}
	}
	testkit.WaitFor(t, waitFor, func() bool {
		e, err := w.q.Get(context.Background(), carrier)
		if err != nil {
			t.Fatal(err)
		}
		if e.Status == touba.StatusFailed || e.Status == touba.StatusParked {
			t.Fatalf("carrier %s is %s (%s), want done", carrier, e.Status, e.ErrorCode)
		}
		return e.Status == touba.StatusDone
	}, "the carrier done")
	cs := calls(t, callsFile)
	if len(cs) != 1 {
		t.Fatalf("%d calls, want 1", len(cs))
	}
	return carrier, cs[0]
}

// TestGatheredRunReadsNoBodyItsStepsDoNotName: steps that read neither
// /event nor /events load no merged body.
func TestGatheredRunReadsNoBodyItsStepsDoNotName(t *testing.T) {
	cf := tmp(t, "calls")
	w, c := gatherWorld(t, okInput(cf, map[string]any{"literal": 1}))
	runGathering(t, w, cf)
	if got := c.bodies.Load(); got != 0 {
		t.Fatalf("the run loaded %d merged bodies, want 0: no step reads /event or /events", got)
	}
}

// TestGatheredRunReadsTheLastBodyForEvent: a step reading /event (the
// last delivery) loads that one merged body only.
func TestGatheredRunReadsTheLastBodyForEvent(t *testing.T) {
	cf := tmp(t, "calls")
	w, c := gatherWorld(t, okInput(cf, ref("/event/body/seq")))
	_, cl := runGathering(t, w, cf)
	if got := c.bodies.Load(); got != 1 {
		t.Fatalf("the run loaded %d merged bodies, want 1 (the last, for /event)", got)
	}
	var in struct {
		Data int `json:"data"`
	}
	if err := json.Unmarshal(cl.Input, &in); err != nil || in.Data != 4 {
		t.Fatalf("input %s, want data 4 (the last delivery's seq)", cl.Input)
	}
}

// TestGatheredRunReadsEveryBodyOnceForEvents: a step reading /events and
// /events/2 sees every delivery in order, each merged body read once for
// the array and once for the element.
func TestGatheredRunReadsEveryBodyOnceForEvents(t *testing.T) {
	cf := tmp(t, "calls")
	w, c := gatherWorld(t, okInput(cf, map[string]any{"all": ref("/events"), "third": ref("/events/2/body/seq"),
		"first": ref("/events/0/body/seq")}))
	carrier, cl := runGathering(t, w, cf)
	if got := c.bodies.Load(); got > 4 {
		t.Fatalf("the run loaded %d merged bodies, want at most 4 (3 for /events, 1 for /events/2)", got)
	}
	var in struct {
		Data struct {
			All []struct {
				QueueID string `json:"queue_id"`
				Body    struct {
					Seq int `json:"seq"`
				} `json:"body"`
			} `json:"all"`
			Third int `json:"third"`
			First int `json:"first"`
		} `json:"data"`
	}
	if err := json.Unmarshal(cl.Input, &in); err != nil {
		t.Fatal(err)
	}
	if len(in.Data.All) != 4 || in.Data.All[0].QueueID != carrier || in.Data.Third != 3 || in.Data.First != 1 {
		t.Fatalf("input %s, want 4 events from carrier %s, third 3, first 1", cl.Input, carrier)
	}
	for i, e := range in.Data.All {
		if e.Body.Seq != i+1 {
			t.Fatalf("event %d has seq %d, want %d", i, e.Body.Seq, i+1)
		}
	}
}
