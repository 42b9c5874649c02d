package admin

import (
	"context"
	"sync"
)

// Claims, when set, makes the claims shared with every other process on
// the same stores (the nodes and CLIs of one PostgreSQL database): held
// names what holds the entry elsewhere.
type Claims interface {
	Claim(ctx context.Context, queueID, what string) (held string, err error)
	Release(ctx context.Context, queueID string)
}

// busy is the set of queue entries an operator action is working on: a
// compensation holds its entry from its status check to the end of the
// handler call, and a replay (or a resolve that puts the entry back to
// pending) holds it from its check to its queue update. Taking the entry
// before checking its status makes the check and the claim one step: a
// `queue replay` cannot resume an entry between a compensation's "not
// pending or running" check and its call, nor the other way round.
//
// On files one Service owns them at a time (the daemon's, or the CLI's when
// no daemon holds the journal lock), and only operator actions move an
// entry out of done, failed or parked, so an in-process set is enough; on
// a database shared by nodes the claim is also taken there (Claims).
type busy struct {
	mu    sync.Mutex
	holds map[string]string // queue id -> what holds it
}

// take claims id for what (here, then in shared when set); it returns
// what holds it already, or "".
func (b *busy) take(shared Claims, id, what string) string {
	b.mu.Lock()
	if held, ok := b.holds[id]; ok {
		b.mu.Unlock()
		return held
	}
	if b.holds == nil {
		b.holds = map[string]string{}
	}
	b.holds[id] = what
	b.mu.Unlock()
	if shared == nil {
		return ""
	}
	held, err := shared.Claim(context.Background(), id, what)
	if err != nil {
		held = "claim that could not be checked (" + err.Error() + ")"
	}
	if held != "" {
		b.mu.Lock()
		delete(b.holds, id)
		b.mu.Unlock()
	}
	return held
}

// drop releases id.
func (b *busy) drop(shared Claims, id string) {
	if shared != nil {
		shared.Release(context.Background(), id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.holds, id)
}
