package storetest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// testOversizedKeysRefusedAlone (issue 43): deliveries whose concurrency
// key, gathering key or cancel_on match value is over touba.MaxKeyBytes,
// enqueued concurrently with ordinary ones (so that they would share the
// writer's batches), are refused alone with KeyTooLong and leave no entry;
// every other delivery is stored. Random letters, which no compression
// shortens into a PostgreSQL btree row.
func testOversizedKeysRefusedAlone(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	long := func() string {
		b := make([]byte, 6000)
		for i := range b {
			b[i] = byte('a' + rand.IntN(26))
		}
		return `"` + string(b) + `"`
	}
	oversized := map[string]func(d *touba.Delivery){
		"conc":   func(d *touba.Delivery) { d.ConcKey, d.ConcMax = long(), 1 },
		"gather": func(d *touba.Delivery) { d.Gather = debounce(long()) },
		"cancel": func(d *touba.Delivery) {
			d.CancelKeys = []touba.MatchValue{{Key: touba.CancelKey("trigger:k", 0), Value: long()}}
		},
	}
	const ordinary = 60
	var wg sync.WaitGroup
	errs := make(chan error, ordinary+len(oversized))
	for i := range ordinary {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := delivery(fmt.Sprintf("ok-%02d", i), `{}`)
			if i%2 == 0 {
				d.ConcKey, d.ConcMax = fmt.Sprintf(`"k%d"`, i%5), 1
			}
			if r, err := e.Queue.Enqueue(e.ctx, d); err != nil || !r.Created {
				errs <- fmt.Errorf("ordinary delivery %s: %+v, %v", d.EventID, r, err)
			}
		}()
		if i%(ordinary/len(oversized)) == 0 {
			name := []string{"conc", "gather", "cancel"}[i/(ordinary/len(oversized))]
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := delivery("long-"+name, `{}`)
				d.TriggerRef = "trigger:k"
				oversized[name](d)
				if _, err := e.Queue.Enqueue(e.ctx, d); touba.ErrorCode(err) != touba.EKeyTooLong {
					errs <- fmt.Errorf("oversized %s: %v, want %s", name, err, touba.EKeyTooLong)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	es, err := e.Queue.List(e.ctx, touba.EntryFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != ordinary {
		t.Fatalf("%d entries, want the %d ordinary ones", len(es), ordinary)
	}
}

// testBeginWaitKeyTooLong: a wait whose value is over touba.MaxKeyBytes
// is refused with KeyTooLong and stores nothing; the entry stays running
// under its lease, so the dispatcher can fail the step.
func testBeginWaitKeyTooLong(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	a := e.waiter(t, "a", "")
	long := `"` + strings.Repeat("v", touba.MaxKeyBytes-1) + `"`
	_, err := ws.BeginWait(e.ctx, e.tok(a), eventWait(a, "paid", touba.WaitKey("trigger:a", "paid"), long, nil))
	if got, want := touba.ErrorCode(err), touba.EKeyTooLong; got != want {
		t.Fatalf("begin wait of %d bytes: %v, want %s", len(long), err, want)
	}
	e.wantStatus(t, a, touba.StatusRunning, "")
	if all, err := ws.Waits(e.ctx, a); err != nil || len(all) != 0 {
		t.Fatalf("waits after a refused begin: %+v, %v", all, err)
	}
}
