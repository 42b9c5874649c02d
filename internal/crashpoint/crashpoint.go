// Package crashpoint lets tests kill the daemon abruptly at named points
// between two durable steps (DESIGN: crash points are testable).
package crashpoint

import (
	"os"
	"syscall"
)

// CrashpointEnv names the environment variable that arms one crash point.
const Env = "TOUBA_CRASHPOINT"

// armed is read once: a crash point costs one string comparison when unset.
var armed = os.Getenv(Env)

// Hit kills the process with SIGKILL when TOUBA_CRASHPOINT equals
// name, so tests can stop it abruptly between two durable steps and check,
// after a restart, that nothing acknowledged was lost and nothing applied
// was repeated. SIGKILL, not os.Exit: no deferred call, no flush, no
// clean-up may run, exactly as in a real crash.
func Hit(name string) {
	if armed == "" || armed != name {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way; do not run one more instruction of the caller
}
