package cli

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
)

// Default file names (SPEC §3), under $STATE_DIRECTORY or ./.touba, and
// the admin socket's, under $RUNTIME_DIRECTORY or ./.touba.
const (
	DefaultQueueFile   = "touba.trigger-queue.sqlite"
	DefaultStateFile   = "touba.triggers.sqlite"
	DefaultJournalFile = "touba.effect-journal.sqlite"
	DefaultAdminSocket = "admin.sock"
)

// Operator holds the flags every operator command shares: where the
// daemon's socket is, and where its files are when no daemon runs (the
// same flags, defaults and TOUBA_<FLAG> variables as serve), and --json.
type Operator struct {
	AdminSocket, Queue, State, Journal string
	Database                           string
	TakeOverStaleLock, JSON            bool
	// For effects compensate without a daemon: the configuration to call
	// the binding with.
	Program, Manifest string
	// AllowUnisolated is serve's --allow-unisolated-handlers, for the
	// handler a compensation starts without a daemon.
	AllowUnisolated bool
	// EgressDeny is serve's --egress-deny, for the webhook binding a
	// compensation calls without a daemon.
	EgressDeny string
	// ExpressionCostLimit is serve's --expression-cost-limit, to load
	// Program without a daemon (0: the default).
	ExpressionCostLimit uint64
	// stateIsFilter: --state filters effects by state (Define without
	// the state file's --state).
	stateIsFilter bool
}

// Define defines the shared flags on fs. The effects commands use
// --state to filter by effect state (SPEC §6), so there (stateFileFlag
// false) the state file is --state-file, which defaults to $TOUBA_STATE
// as --state does elsewhere; every command accepts --state-file.
func (f *Operator) Define(fs *flag.FlagSet, stateFileFlag bool) {
	f.stateIsFilter = !stateFileFlag
	stateDir, runDir := DefaultDir("STATE_DIRECTORY"), DefaultDir("RUNTIME_DIRECTORY")
	fs.StringVar(&f.AdminSocket, "admin-socket", filepath.Join(runDir, DefaultAdminSocket), "the daemon's admin socket")
	fs.StringVar(&f.Queue, "queue", filepath.Join(stateDir, DefaultQueueFile), "queue file, used when no daemon runs")
	stateFile := filepath.Join(stateDir, DefaultStateFile)
	if v := os.Getenv("TOUBA_STATE"); v != "" {
		stateFile = v
	}
	if stateFileFlag {
		fs.StringVar(&f.State, "state", stateFile, "state file, used when no daemon runs")
	}
	fs.StringVar(&f.State, "state-file", stateFile, "state file, used when no daemon runs (same as --state)")
	fs.StringVar(&f.Journal, "effect-journal", filepath.Join(stateDir, DefaultJournalFile), "effect journal, used when no daemon runs")
	fs.StringVar(&f.Database, "database", "", "postgres://... : the nodes' database, used when no daemon answers on the socket (instead of the files)")
	fs.BoolVar(&f.TakeOverStaleLock, "take-over-stale-lock", false, "when no daemon runs: take over a lock left by a dead process of this host and boot")
	fs.BoolVar(&f.JSON, "json", false, "print JSON instead of a table")
}

// envFlags are the operator flags that read TOUBA_<FLAG>: where things
// are, as for serve. Filters and verdicts never come from the environment:
// an exported TOUBA_STATUS or TOUBA_RECEIPT_REF must not change what a
// command selects or records.
var envFlags = map[string]bool{"admin-socket": true, "queue": true, "state": true, "state-file": true,
	"effect-journal": true, "database": true, "take-over-stale-lock": true, "json": true, "program": true, "manifest": true,
	"allow-unisolated-handlers": true, "egress-deny": true, "history": true, "expression-cost-limit": true}

// Parse parses an operator command's flags, defined on fs with Define;
// see envFlags. In the effects commands --state is a filter, so it never
// reads TOUBA_STATE.
func (f *Operator) Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	return f.ParseExcept(fs, args)
}

// ParseExcept is Parse where the flags named by own never read the
// environment either: a command's own meaning of a name that elsewhere
// says where things are (triggers test's --program is a candidate to try,
// not the daemon's program).
func (f *Operator) ParseExcept(fs *flag.FlagSet, args []string, own ...string) ([]string, error) {
	var noEnv []string
	fs.VisitAll(func(fl *flag.Flag) {
		if !envFlags[fl.Name] || (f.stateIsFilter && fl.Name == "state") || slices.Contains(own, fl.Name) {
			noEnv = append(noEnv, fl.Name)
		}
	})
	return Parse(fs, args, noEnv...)
}
