package trigger_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/trigger"
)

// fire sends n requests at once and counts answers by status and code.
func fire(f *fixture, n int, body func(i int) string) map[string]int {
	var mu sync.Mutex
	got := map[string]int{}
	queueIDs := map[string]bool{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			r := f.send("POST", "t/plain", body(i), map[string]string{"X-Touba-Event-Id": "same"})
			key := fmt.Sprintf("%d %s%s", r.Status, r.Answer, r.Error.Code)
			mu.Lock()
			got[key]++
			queueIDs[r.QueueID+r.Error.QueueID] = true
			mu.Unlock()
		}(i)
	}
	close(start)
	wg.Wait()
	got["distinct queue ids"] = len(queueIDs)
	return got
}

func TestConcurrentIdenticalDeliveries(t *testing.T) {
	f := newFixture(t, queue.Options{})
	got := fire(f, 200, func(int) string { return `{"same":true}` })
	if got["202 enqueued"] != 1 || got["202 duplicate"] != 199 || got["distinct queue ids"] != 1 {
		t.Fatalf("answers %v, want 1 enqueued and 199 duplicates of one entry", got)
	}
	if n := f.count(t); n != 1 {
		t.Fatalf("entries=%d, want 1", n)
	}
}

func TestConcurrentConflictingDeliveries(t *testing.T) {
	f := newFixture(t, queue.Options{})
	got := fire(f, 200, func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	if got["202 enqueued"] != 1 || got["409 "+touba.ETriggerEventPayloadConflict] != 199 || got["distinct queue ids"] != 1 {
		t.Fatalf("answers %v, want 1 enqueued and 199 conflicts naming one entry", got)
	}
	if n := f.count(t); n != 1 {
		t.Fatalf("entries=%d, want 1", n)
	}
}

// TestDiskFull fills a small tmpfs under the queue file: every 202 must be
// on disk afterwards and the refusals must be 503 with Retry-After.
func TestDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "small")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })

	ctx := context.Background()
	q, err := queue.Open(ctx, filepath.Join(mnt, "queue.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(ctx, filepath.Join(dir, "state.sqlite"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, _ := trigger.ParseProgram("p.json", []byte(strings.Replace(testProgram, `"max_body_bytes": 64`, `"max_body_bytes": 65536`, 1)))
	in := &trigger.Intake{Queue: q, Log: st}
	in.SetConfig(&trigger.Config{Program: p})
	f := &fixture{t: t, queue: q, state: st, intake: in}
	f.srv = newServer(t, in)

	body := strings.Repeat("z", 60000)
	var accepted []string
	refused := 0
	for i := 0; i < 200 && refused < 3; i++ {
		r := f.send("POST", "t/plain", fmt.Sprintf("%s%d", body, i), nil)
		switch r.Status {
		case 202:
			accepted = append(accepted, r.QueueID)
		case 503:
			if r.Error.Code != touba.ETriggerUnavailable || r.RetryAfter == "" {
				t.Fatalf("503 answer %+v", r)
			}
			refused++
		default:
			t.Fatalf("status %d: %+v", r.Status, r)
		}
	}
	if refused == 0 || len(accepted) == 0 {
		t.Fatalf("accepted %d, refused %d: the disk never filled or nothing fit", len(accepted), refused)
	}
	f.srv.Close()
	q.Close()
	q2, err := queue.Open(ctx, filepath.Join(mnt, "queue.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	for _, id := range accepted {
		if d, err := q2.Get(ctx, id); err != nil || d == nil {
			t.Fatalf("acknowledged entry %s missing after reopen: %v", id, err)
		}
	}
}
