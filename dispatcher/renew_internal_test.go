package dispatcher

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
)

// renewQueue counts renewals and answers each with what lost says.
type renewQueue struct {
	memStores
	mu     sync.Mutex
	tokens []int64
	lost   bool
	failed bool // answer every renewal with an error other than LeaseLost
	seen   chan struct{}
}

func (q *renewQueue) Renew(_ context.Context, _ string, token int64) error {
	q.mu.Lock()
	q.tokens = append(q.tokens, token)
	lost, failed := q.lost, q.failed
	q.mu.Unlock()
	select {
	case q.seen <- struct{}{}:
	default: // the test counts no more
	}
	if lost {
		return touba.Errorf(touba.ELeaseLost, "lease lost")
	} else if failed {
		return errors.New("the database does not answer")
	}
	return nil
}

// TestRenewKeepsTheLeaseUntilStopped: a run longer than RenewEvery renews
// its entry's lease again and again under its token; a renewal refused with
// LeaseLost ends the run's context.
func TestRenewKeepsTheLeaseUntilStopped(t *testing.T) {
	q := &renewQueue{seen: make(chan struct{}, 16)}
	d := &Dispatcher{queue: q, log: zerolog.Nop(), opts: Options{RenewEvery: 5 * time.Millisecond, LeaseTTL: time.Minute}}
	e := &touba.Delivery{QueueID: "q1", LeaseToken: 7}
	ctx, stop := d.renew(context.Background(), e, zerolog.Nop())
	for i := range 3 {
		select {
		case <-q.seen:
		case <-time.After(10 * time.Second):
			t.Fatalf("renewal %d never came", i+1)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the run's context ended while its renewals succeeded: %v", ctx.Err())
	}
	q.mu.Lock()
	q.lost = true
	q.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a renewal refused with LeaseLost did not end the run's context")
	}
	stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, tok := range q.tokens {
		if tok != 7 {
			t.Errorf("renewed under token %d, want 7", tok)
		}
	}
}

// TestRenewStoppedBeforeItsTimer: a run shorter than RenewEvery renews
// nothing, and its stop ends the context.
func TestRenewStoppedBeforeItsTimer(t *testing.T) {
	q := &renewQueue{seen: make(chan struct{}, 1)}
	d := &Dispatcher{queue: q, log: zerolog.Nop(), opts: Options{RenewEvery: time.Hour, LeaseTTL: time.Hour}}
	ctx, stop := d.renew(context.Background(), &touba.Delivery{QueueID: "q1", LeaseToken: 1}, zerolog.Nop())
	stop()
	if ctx.Err() == nil {
		t.Fatal("stop left the run's context alive")
	}
	if len(q.tokens) != 0 {
		t.Fatalf("%d renewals for a run shorter than RenewEvery", len(q.tokens))
	}
}

// blackHole is a store whose renewals never answer (a black-holed
// connection): only the expiry can end the run.
type blackHole struct {
	memStores
	release chan struct{}
}

func (q blackHole) Renew(context.Context, string, int64) error {
	<-q.release
	return nil
}

// TestRenewUnansweredEndsAtTheHold: when the first renewal never answers,
// the run's context still ends once the lease's hold (--lease-ttl less its
// margin) has passed since the run began; a run whose RenewEvery is past
// the hold is ended by it too.
func TestRenewUnansweredEndsAtTheHold(t *testing.T) {
	for _, every := range []time.Duration{10 * time.Millisecond, time.Hour} {
		q := blackHole{release: make(chan struct{})}
		d := &Dispatcher{queue: q, log: zerolog.Nop(), opts: Options{RenewEvery: every, LeaseTTL: 80 * time.Millisecond}}
		began := time.Now()
		ctx, stop := d.renew(context.Background(), &touba.Delivery{QueueID: "q1", LeaseToken: 1}, zerolog.Nop())
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("RenewEvery %s: the run's context outlived an unanswered renewal", every)
		}
		if waited := time.Since(began); waited < 60*time.Millisecond {
			t.Errorf("RenewEvery %s: ended after %s, before the hold (60ms)", every, waited)
		}
		stop()
		close(q.release)
	}
}

// TestRenewPushesTheExpiryOut: renewals that succeed keep the run going
// past the hold (--lease-ttl less its margin) for as long as they do; once
// they fail, the run's context ends at the hold after the last success.
func TestRenewPushesTheExpiryOut(t *testing.T) {
	q := &renewQueue{seen: make(chan struct{}, 1)}
	const ttl = 2 * time.Second // hold: 1.5 s
	d := &Dispatcher{queue: q, log: zerolog.Nop(), opts: Options{RenewEvery: 20 * time.Millisecond, LeaseTTL: ttl}}
	began := time.Now()
	ctx, stop := d.renew(context.Background(), &touba.Delivery{QueueID: "q1", LeaseToken: 1}, zerolog.Nop())
	defer stop()
	for time.Since(began) < 2*ttl {
		select {
		case <-q.seen:
		case <-ctx.Done():
			t.Fatalf("the run's context ended after %s while its renewals succeeded", time.Since(began))
		case <-time.After(10 * time.Second):
			t.Fatal("no renewal for 10 s")
		}
	}
	q.mu.Lock()
	q.failed = true
	q.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("failing renewals never ended the run's context")
	}
}
