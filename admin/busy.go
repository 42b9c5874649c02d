package admin

import "sync"

// busy is the set of queue entries an operator action is working on: a
// compensation holds its entry from its status check to the end of the
// handler call, and a replay (or a resolve that puts the entry back to
// pending) holds it from its check to its queue update. Taking the entry
// before checking its status makes the check and the claim one step: a
// `queue replay` cannot resume an entry between a compensation's "not
// pending or running" check and its call, nor the other way round.
//
// One Service owns the files at a time (the daemon's, or the CLI's when no
// daemon holds the journal lock), and only operator actions move an entry
// out of done, failed or parked, so an in-process set is enough.
type busy struct {
	mu    sync.Mutex
	holds map[string]string // queue id -> what holds it
}

// take claims id for what; it returns what holds it already, or "".
func (b *busy) take(id, what string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if held, ok := b.holds[id]; ok {
		return held
	}
	if b.holds == nil {
		b.holds = map[string]string{}
	}
	b.holds[id] = what
	return ""
}

// drop releases id.
func (b *busy) drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.holds, id)
}
