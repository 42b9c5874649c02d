package handler

// Exported for the external tests only.
var (
	ParseRetryAfter = parseRetryAfter
)

// WaitPersistent waits until every process a persistent runner started
// has ended.
func WaitPersistent(r Runner) { r.(*persistentRunner).wait() }
