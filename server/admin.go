package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/user"
	"strings"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dispatcher"
)

// newService is the admin API over open stores, for the daemon and for
// the CLI on files alike. current gives the configuration in force (nil
// when none is loaded: the CLI on files without --program).
func newService(st *stores, current func() *dispatcher.Config, costLimit uint64, log zerolog.Logger) *admin.Service {
	svc := &admin.Service{Queue: st.Queue, State: st.State, Log: log, Claims: st.Claims}
	svc.Tester = newTester(current, costLimit)
	svc.HasTrigger = func(ref string) bool {
		c := current()
		if c == nil {
			return true
		}
		_, ok := c.Program.Lookup(strings.TrimPrefix(ref, "trigger:"))
		return ok
	}
	svc.Keyed = func(e *touba.Delivery) {
		if c := current(); c != nil {
			if t, ok := c.Program.Lookup(strings.TrimPrefix(e.TriggerRef, "trigger:")); ok {
				t.SetConcurrencyKey(e)
				// A replayed delivery is an accepted delivery like any:
				// it is pinned, may match a wait or cancel an entry, and
				// is gathered with its key's deliveries.
				t.SetDurable(e)
				t.SetGather(e)
				// And, at an accepting trigger, feeds its routes (SPEC
				// §2.4); a route whose key fails is left unfed, said so
				// in the entry's routing.
				_ = t.SetRoutes(e)
			}
		}
	}
	svc.HeldKeys = st.Queue.HeldKeys
	svc.History = st.History
	svc.ProgramTriggers = programTriggers(current)
	if st.Circuits != nil {
		svc.Circuits = st.Circuits.Circuits
	}
	svc.Compensable = func(toolRef string) bool {
		c := current()
		if c == nil {
			return false
		}
		b := c.Bindings[toolRef]
		return b != nil && b.Compensation
	}
	if st.Journal != nil {
		svc.Journal = st.Journal
		j := st.Journal
		svc.Compensator = func(ctx context.Context, e *touba.Delivery, steps map[string]touba.StepOutput,
			orig *touba.Effect) (*touba.Compensation, error) {
			return dispatcher.Compensate(ctx, current(), j, e, steps, orig)
		}
		svc.StepInput = func(e *touba.Delivery, steps map[string]touba.StepOutput, eff *touba.Effect) (json.RawMessage, error) {
			return dispatcher.StepInput(current(), e, steps, eff)
		}
	}
	return svc
}

// adminService is the admin API over the daemon's own stores.
func (s *Server) adminService() *admin.Service {
	svc := newService(s.store, s.current.Load, s.cfg.ExpressionCostLimit, s.log.With().Str("component", "admin").Logger())
	svc.Probe = s.health.Load
	svc.NoWorker = s.noWorker
	if h := s.history; h != nil {
		svc.HistoryWindow = h.window
		svc.LastPass = h.last.Load
		svc.StorageCache = h.measure.Load
	}
	if s.disp != nil {
		svc.Wake = s.disp.Notify
		svc.PausesChanged = s.disp.PausesChanged
		svc.CountByTrigger = gatedCounts{s}.CountByTrigger
		if s.store.Circuits == nil {
			svc.Circuits = func(context.Context) ([]touba.CircuitState, error) { return s.disp.Circuits(), nil }
		}
	}
	return svc
}

// FilesConfig is what the operator CLI opens when no daemon answers.
type FilesConfig struct {
	Queue, State, Journal string
	// Database, when set, is the PostgreSQL database of the nodes (SPEC
	// §8) instead of the files: the CLI works on it whether nodes run or
	// not, and takes no lock.
	Database          string
	TakeOverStaleLock bool
	// ReadOnly opens the SQLite files read-only and without the journal
	// lock, for commands that only read (SPEC §6); a database is opened as
	// usual (it has no lock).
	ReadOnly bool
	// Program and Manifest, when given, are the configuration a
	// compensation calls its binding with.
	Program, Manifest string
	// ExpressionCostLimit is serve's --expression-cost-limit, for loading
	// that program (0: the default).
	ExpressionCostLimit uint64
	// AllowUnisolatedHandlers runs the manifest's process bindings without
	// the network grant with the host's network where this host cannot
	// isolate them (warned), as serve's --allow-unisolated-handlers; else
	// OpenFiles refuses them (NetworkIsolationUnavailable), as serve does.
	AllowUnisolatedHandlers bool
	// EgressDeny is serve's --egress-deny, for a webhook binding a
	// compensation calls without a daemon.
	EgressDeny []netip.Prefix
	Log        zerolog.Logger
	// Notes receives what opening found (a lock taken over, effects now
	// unknown), for the operator.
	Notes io.Writer
}

// Files is the admin API on the stores themselves, held under the journal
// lock, for the CLI when no daemon runs.
type Files struct {
	Service *admin.Service
	// Operator names who is asking, for the audit trail.
	Operator string
	store    *stores
	closers  []func() error
}

// OpenFiles opens the stores exactly as the daemon does (sqlite.Open),
// never creating a file an operator only meant to look at.
func OpenFiles(ctx context.Context, c FilesConfig) (*Files, error) {
	if c.Journal == "" && c.Database == "" && !c.ReadOnly {
		fmt.Fprintln(c.Notes, "warning: no --effect-journal, so no lock keeps a daemon off these files")
	}
	// On a database the CLI is one more node, under a name of its own; it
	// leases nothing and recovers nothing (the daemons' leases do).
	st, err := openStores(ctx, storeConfig{Queue: c.Queue, State: c.State, Journal: c.Journal, Database: c.Database,
		NodeID: "cli:" + operator(), TakeOverStaleLock: c.TakeOverStaleLock, ExistingOnly: true,
		ReadOnly: c.ReadOnly && c.Database == "", Log: c.Log})
	if err != nil {
		return nil, err
	}
	f := &Files{store: st, Operator: operator()}
	if st.Lock != nil && st.Lock.TookOver != nil {
		fmt.Fprintf(c.Notes, "took over a stale journal lock of %s\n", st.Lock.TookOver)
	}
	for _, e := range st.Recovered {
		fmt.Fprintf(c.Notes, "recovery: effect %s %s was dispatched when the daemon stopped; it is now unknown\n", e.Scope, e.EffectID)
	}
	var dcfg *dispatcher.Config
	if c.Program != "" || c.Manifest != "" {
		// This process resolves every secret and starts handlers as its
		// own user, as the daemon does: it hides itself from them the
		// same way (SPEC §2.2), before any secret is read.
		err := Harden()
		var loaded *Loaded
		if err == nil {
			loaded, err = LoadConfig(c.Program, c.Manifest, c.ExpressionCostLimit)
		}
		if err == nil {
			// A compensation starts the binding's handler from here, so
			// the CLI holds to SPEC §2.2 as serve does: never silently
			// with the host's network.
			err = checkIsolation(loaded.Manifest, c.AllowUnisolatedHandlers, c.Log)
		}
		if err == nil {
			dcfg, err = dispatcher.NewConfig(loaded.Program, loaded.Manifest, loaded.Resolved, true, &dispatcher.Stubs{},
				dispatcher.Outbound{EgressDeny: c.EgressDeny}, c.Log)
		}
		if err != nil {
			st.Close()
			return nil, err
		}
		f.closers = append(f.closers, func() error { dcfg.CloseRunners(nil); return nil })
	}
	f.Service = newService(st, func() *dispatcher.Config { return dcfg }, c.ExpressionCostLimit, c.Log)
	f.Service.HistoryWindow = touba.DefaultHistory // what a daemon with the default forgets
	if dcfg == nil {
		f.Service.Compensator = nil // the admin API then says what to give
	}
	return f, nil
}

// Close closes the stores and releases the lock.
func (f *Files) Close() error {
	for _, c := range f.closers {
		c()
	}
	return f.store.Close()
}

// operator names the user of the CLI for the audit trail.
func operator() string {
	if u, err := user.Current(); err == nil {
		return fmt.Sprintf("%s uid %s pid %d (files, no daemon)", u.Username, u.Uid, os.Getpid())
	}
	return fmt.Sprintf("uid %d pid %d (files, no daemon)", os.Getuid(), os.Getpid())
}
