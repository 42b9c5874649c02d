// Package dispatcher drains the queue: it leases pending entries, runs
// their trigger's steps in order, resolves step inputs from the run
// context, consults the effect journal before every external write and
// follows its rules, checkpoints step outputs, and ends each entry done,
// failed, parked or cancelled, retrying with backoff within the trigger's
// limits. A sleep or wait_for step leaves the entry waiting, with no
// worker held, until the wake loop or a matching delivery ends the wait
// (wait.go, wake.go); a run of an entry accepted under an earlier
// definition of its trigger is checked against it (pinning.go).
package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/fair"
	"github.com/touba/touba-trigger/tracing"
)

// Queue is what the dispatcher needs of the queue file.
// Every change carries the fencing token of the run's lease.
type Queue interface {
	Lease(ctx context.Context, n int) ([]*touba.Delivery, error)
	Finish(ctx context.Context, queueID string, token int64, status, code, message string) error
	Retry(ctx context.Context, queueID string, token int64, notBefore time.Time, code, message string) error
	Postpone(ctx context.Context, queueID string, token int64, notBefore time.Time, code, message string) error
	Renew(ctx context.Context, queueID string, token int64) error
}

// State is what the dispatcher needs of the state file.
type State interface {
	RecordRun(r *touba.Run)
	SaveStep(queueID string, token int64, stepID, runID string, output json.RawMessage) error
	Steps(ctx context.Context, queueID string) (map[string]touba.StepOutput, error)
}

// Journal is what the dispatcher needs of the effect journal.
type Journal interface {
	Prepare(ctx context.Context, p touba.EffectPrepare) (*touba.Effect, error)
	Dispatch(ctx context.Context, scope, effectID, callID string) error
	Finish(ctx context.Context, o touba.EffectOutcome) error
	// Abandon releases an effect whose call ended without its outcome
	// journaled, and records it unknown (see journal.Journal.Abandon).
	Abandon(ctx context.Context, scope, effectID, callID string) error
	// Get returns an effect, or nil and no error when there is none:
	// version pinning asks whether a step's effect was applied.
	Get(ctx context.Context, scope, effectID string) (*touba.Effect, error)
}

// DefaultWorkers is serve's --workers default (SPEC §3 leaves it to us).
// Each worker is one run in progress: a goroutine, not a thread or a
// process. The journal's group commit shares one fsync among the runs
// waiting on it, so the fsyncs per effect fall as runs in flight grow:
// about 6 at 4 workers, 0.75 at 64, 0.2 at 256, where the dispatcher keeps
// up with intake (docs/performance.md). Process-per-call bindings are
// bounded by their max_concurrency, DefaultProcessConcurrency when unset.
const DefaultWorkers = 256

// DefaultProcessConcurrency bounds the calls in flight of a process-per-call
// binding that sets no max_concurrency: DefaultWorkers processes started at
// once would swamp the host.
const DefaultProcessConcurrency = 16

// Options configure a Dispatcher.
type Options struct {
	Workers int
	// PollInterval bounds how long a due retry waits when nothing wakes
	// the dispatcher; default 100ms.
	PollInterval time.Duration
	Now          func() time.Time
	Log          zerolog.Logger
	// Observe, when set, sees each handler call's outcome and duration.
	Observe func(toolRef, outcome string, d time.Duration)
	// Tracing makes the touba.run, touba.step and touba.handler.call
	// spans; nil means off.
	Tracing *tracing.Tracing
	// RenewEvery is how often a run renews its entry's lease (SPEC §8: a
	// third of --lease-ttl); 0 for stores whose leases never expire.
	RenewEvery time.Duration
	// LeaseTTL, with RenewEvery, is how long a lease lasts unrenewed: a run
	// whose renewals have all failed for LeaseTTL minus a margin ends its
	// context (no new call, no more retries of a call in flight) before
	// another node may take the entry over.
	LeaseTTL time.Duration
	// Slots holds the bindings' max_concurrency across the nodes sharing
	// a database; nil bounds this process's calls only (slots.go).
	Slots touba.SlotStore
	// Circuits holds the bindings' circuits across the nodes sharing a
	// database; nil keeps them in this process (circuit.go).
	Circuits touba.CircuitStore
	// OnCircuit, when set, sees each circuit transition (metrics).
	OnCircuit func(toolRef, from, to string)
	// Waits keeps the durable steps' waits, cancellations, programs and
	// effect generations (the queue store, SPEC §2.3); nil runs no sleep
	// or wait_for step (they fail), and skips version pinning.
	Waits touba.WaitStore
}

// Dispatcher runs queue entries with a fixed number of workers.
type Dispatcher struct {
	queue   Queue
	state   State
	journal Journal // nil when no binding writes externally
	opts    Options
	log     zerolog.Logger

	cfg     atomic.Pointer[Config]
	wake    chan struct{}
	stop    chan struct{} // closed: lease no more
	jobs    chan job      // to an idle runner (runners.go)
	runners atomic.Int32  // runners alive
	runCtx  context.Context
	cancel  context.CancelFunc // kills running handlers at the end of shutdown
	wg      sync.WaitGroup
	once    sync.Once

	slots    slots        // max_concurrency semaphores by binding
	waiting  atomic.Int64 // runs waiting for a binding slot or circuit
	circuits circuits     // circuit breakers by binding

	waker waker      // wakes sleeping and timed waits (wake.go)
	fair  *fairLease // planned leases, when the queue can (fairlease.go)
	// saved are the definitions' digests stored by this process: a
	// reload writes only the triggers it changed (pinning.go).
	saved sync.Map
}

// New returns a dispatcher; Start runs it.
func New(q Queue, s State, j Journal, cfg *Config, opts Options) *Dispatcher {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 100 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Tracing == nil {
		opts.Tracing = tracing.Off()
	}
	d := &Dispatcher{queue: q, state: s, journal: j, opts: opts, log: opts.Log,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), jobs: make(chan job)}
	d.runCtx, d.cancel = context.WithCancel(context.Background())
	d.waker.init()
	if fq, ok := q.(touba.FairQueue); ok {
		d.fair = &fairLease{fq: fq, sched: fair.New(), held: map[string]map[string]int64{}}
	}
	d.cfg.Store(cfg)
	return d
}

// SetConfig installs a reloaded program and bindings; runs already going
// finish with the configuration they started with. The new triggers'
// definitions are saved first (pinning.go), so an entry accepted under
// them can be checked after a later reload.
func (d *Dispatcher) SetConfig(c *Config) {
	d.savePrograms(c)
	d.cfg.Store(c)
	d.parkStranded(c)
}

// Notify wakes the leaser: an entry was enqueued.
func (d *Dispatcher) Notify() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Start leases and runs entries until Close. Entries left running by a
// crash are the store's to put back at open (sqlite.Config.RequeueRunning):
// on a shared database another node may be running them.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.savePrograms(d.cfg.Load())
	d.parkStranded(d.cfg.Load())
	d.wg.Add(1)
	go d.leaser()
	if d.opts.Waits != nil {
		d.wg.Add(1)
		go d.wakeLoop()
	}
	return nil
}

// StopLeasing makes the dispatcher lease nothing more; running entries go
// on. Shutdown calls it first (SPEC §3.3), then Close.
func (d *Dispatcher) StopLeasing() { d.once.Do(func() { close(d.stop) }) }

// Close stops leasing and waits for running entries. Handlers still
// running after grace are killed (their effects end unknown) and their
// entries are left for the next start to resume.
func (d *Dispatcher) Close(grace time.Duration) {
	d.once.Do(func() { close(d.stop) })
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		d.log.Warn().Dur("grace", grace).Msg("handlers still running at the end of shutdown; killing them")
		d.cancel()
		<-done
	}
	d.cancel()
}

func (d *Dispatcher) leaser() {
	defer d.wg.Done()
	slots := make(chan struct{}, d.opts.Workers)
	tick := time.NewTicker(d.opts.PollInterval)
	defer tick.Stop()
	failures := 0
	for {
		// Take one free worker slot (waiting for one), then every other
		// free slot, and lease that many entries in one transaction.
		select {
		case slots <- struct{}{}:
		case <-d.stop:
			return
		}
		free := 1
	more:
		for free < d.opts.Workers {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break more
			}
		}
		entries, res, err := d.lease(free)
		if err != nil && !errors.Is(err, context.Canceled) {
			// The store does not answer (a database restarting): pause,
			// longer each time up to a few seconds, and resume on its own.
			failures++
			if failures == 1 || failures%50 == 0 {
				d.log.Error().Err(err).Int("failures", failures).Msg("lease failed; dispatcher paused until the store answers")
			}
			for i := len(entries); i < free; i++ {
				<-slots
			}
			select {
			case <-time.After(min(time.Duration(failures)*d.opts.PollInterval, 3*time.Second)):
			case <-d.stop:
				return
			}
			continue
		} else if err == nil && failures > 0 {
			d.log.Info().Int("failures", failures).Msg("lease works again; dispatcher resumed")
			failures = 0
		}
		for i, e := range entries {
			var r *reservation
			if i < len(res) {
				r = res[i]
			}
			d.hand(func() {
				defer func() { <-slots }()
				d.run(e, r)
			})
		}
		for i := len(entries); i < free; i++ {
			<-slots
		}
		if len(entries) == 0 {
			select {
			case <-d.wake:
			case <-tick.C:
			case <-d.stop:
				return
			}
		}
	}
}

func (d *Dispatcher) stopping() bool {
	select {
	case <-d.stop:
		return true
	default:
		return false
	}
}
