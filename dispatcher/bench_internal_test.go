package dispatcher

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/manifest"
	"github.com/touba/touba-trigger/trigger"
)

// memStores answer at once: the benchmark measures the dispatcher's own
// work per run (input, fingerprint, the stub, bookkeeping), not SQL.
type memStores struct{}

func (memStores) Lease(context.Context, int) ([]*touba.Delivery, error)               { return nil, nil }
func (memStores) Finish(context.Context, string, int64, string, string, string) error { return nil }
func (memStores) Retry(context.Context, string, int64, time.Time, string, string) error {
	return nil
}
func (memStores) Postpone(context.Context, string, int64, time.Time, string, string) error {
	return nil
}
func (memStores) Renew(context.Context, string, int64) error { return nil }
func (memStores) RecordRun(*touba.Run)                       {}
func (memStores) SaveStep(string, int64, string, string, json.RawMessage) error {
	return nil
}
func (memStores) Steps(context.Context, string) (map[string]touba.StepOutput, error) {
	return map[string]touba.StepOutput{}, nil
}
func (memStores) Prepare(_ context.Context, p touba.EffectPrepare) (*touba.Effect, error) {
	return &touba.Effect{Scope: p.Scope, EffectID: p.EffectID, State: touba.EffectPrepared, Attempts: 1}, nil
}
func (s memStores) PrepareDispatched(ctx context.Context, p touba.EffectPrepare) (*touba.Effect, error) {
	e, err := s.Prepare(ctx, p)
	e.State = touba.EffectDispatched
	return e, err
}
func (memStores) Dispatch(context.Context, string, string, string) error { return nil }
func (memStores) Abandon(context.Context, string, string, string) error  { return nil }

// memJournal is memStores as a Journal (its Finish takes an outcome).
type memJournal struct{ memStores }

func (memJournal) Finish(context.Context, touba.EffectOutcome) error { return nil }
func (memJournal) Get(context.Context, string, string) (*touba.Effect, error) {
	return nil, nil
}

// BenchmarkRun: one run of the benchmarks' trigger (one external-write step
// on accounting_stub, its input the whole body), with stores that cost
// nothing; the body of scripts/bench/dispatch and bench-e2e's 1 KiB one.
func BenchmarkRun(b *testing.B) {
	for _, c := range []struct{ name, body string }{
		{"order", `{"lines":["a","b"],"order_id":42}`},
		{"1KiB", `{"data":"` + strings.Repeat("x", 1013) + `"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			d, e := benchDispatcher(b)
			e.Body = []byte(c.body)
			b.ReportAllocs()
			for b.Loop() {
				d.run(e, nil)
			}
		})
	}
}

// benchDispatcher is a dispatcher of the benchmarks' trigger on stores that
// cost nothing, with DefaultWorkers, and an entry of it leased.
func benchDispatcher(b *testing.B) (*Dispatcher, *touba.Delivery) {
	p, err := trigger.ParseProgram("p.json", []byte(`{"air_version": "touba-air-v1", "triggers": [
		{"ref": "trigger:bench/D", "source": {"kind": "webhook"},
		 "steps": [{"id": "write", "tool": "tool:bench/Write", "input": {"order": {"$ref": "/event/body"}}}]}]}`))
	if err != nil {
		b.Fatal(err)
	}
	m, err := manifest.Parse(filepath.Join(b.TempDir(), "m.json"), []byte(`{"manifest_version": "touba-manifest-v1",
		"bindings": {"tool:bench/Write": {"handler": {"kind": "accounting_stub"},
		"effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`))
	if err != nil {
		b.Fatal(err)
	}
	res, err := m.Resolve(nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := NewConfig(p, m, res, true, &Stubs{}, Outbound{}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	d := New(memStores{}, memStores{}, memJournal{}, cfg, Options{Log: zerolog.Nop()})
	e := &touba.Delivery{QueueID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", TriggerRef: "trigger:bench/D",
		EventID: "e1", Body: []byte(`{"lines":["a","b"],"order_id":42}`), Headers: map[string]string{"content-type": "application/json"},
		ReceivedAt: time.Now(), Status: touba.StatusRunning, Attempts: 1, LeaseToken: 1, FirstLease: true}
	return d, e
}

// BenchmarkHandOff: runs handed out as the leaser does, 256 slots, each run
// BenchmarkRun's on stores that cost nothing: on a goroutine of its own, as
// before runners.go, and on the runners. What it measures is what a run's
// goroutine costs: its start, its stack's growth, its end.
func BenchmarkHandOff(b *testing.B) {
	d, e := benchDispatcher(b)
	for _, c := range []struct {
		name string
		hand func(j job)
	}{
		{"goroutine", func(j job) { d.wg.Add(1); go func() { defer d.wg.Done(); j() }() }},
		{"runners", d.hand},
	} {
		b.Run(c.name, func(b *testing.B) {
			slots := make(chan struct{}, d.opts.Workers)
			b.ReportAllocs()
			for b.Loop() {
				slots <- struct{}{}
				c.hand(func() {
					defer func() { <-slots }()
					d.run(e, nil)
				})
			}
			for range d.opts.Workers {
				slots <- struct{}{}
			}
		})
	}
	close(d.stop)
	d.wg.Wait()
}
