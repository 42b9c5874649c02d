// Package crashpoint lets tests kill the daemon abruptly at named points
// between two durable steps (DESIGN: crash points are testable).
package crashpoint

import (
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
)

// CrashpointEnv names the environment variable that arms one crash point.
const Env = "TOUBA_CRASHPOINT"

// armed is read once: a crash point costs one string comparison when unset.
var armed = os.Getenv(Env)

var stopped atomic.Bool

// Hit kills the process with SIGKILL when TOUBA_CRASHPOINT equals
// name, so tests can stop it abruptly between two durable steps and check,
// after a restart, that nothing acknowledged was lost and nothing applied
// was repeated. SIGKILL, not os.Exit: no deferred call, no flush, no
// clean-up may run, exactly as in a real crash.
//
// TOUBA_CRASHPOINT=stop:name freezes it instead (SIGSTOP, once): a node
// stopped mid-transaction, for tests of what the others do meanwhile; it
// goes on from there when sent SIGCONT.
func Hit(name string) {
	if armed == "" {
		return
	}
	if armed == "stop:"+name {
		if stopped.CompareAndSwap(false, true) {
			stopHere()
		}
		return
	}
	if armed != name {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way; do not run one more instruction of the caller
}

// stopHere stops the process before the calling goroutine runs one more
// instruction. kill(getpid()) would not: a process-directed signal is
// delivered to the main thread, and until that thread is scheduled and
// starts the group stop, this thread returns and goes on (under load, far
// enough to commit the transaction the test meant to freeze). A signal
// directed at this very thread is taken on the way back from the system
// call; the goroutine is pinned to its thread so that the thread named is
// the one running it.
func stopHere() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
