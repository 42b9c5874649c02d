package workers_test

import (
	"bytes"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestListenLocalServerDown: while the local server refuses connections,
// listen answers nothing, so each call ends unknown in the daemon and is
// handed out again (idempotency_key); once the server is up every call
// arrives, once each, and every entry ends done.
func TestListenLocalServerDown(t *testing.T) {
	w := newWorld(t, sqliteBackend, touba.RetryIdempotencyKey, 1000)
	w.start("--workers", "4")
	lap := newLaptop(t)
	// A port with nothing on it: connections are refused until the
	// laptop's server starts there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	w.send(orders, "o-1", "o-2", "o-3")
	out := startListen(t, w, lap, "http://"+addr+"/webhooks")
	testkit.WaitFor(t, 30*time.Second, func() bool { return out.count("connection refused") >= 2 },
		"listen to find the local server down twice")
	if n := w.count(touba.StatusDone, orders); n != 0 {
		t.Fatalf("%d entries done while the local server was down", n)
	}
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: lap.srv.Config.Handler}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	testkit.WaitFor(t, 60*time.Second, func() bool { return len(lap.received()) >= 3 }, "the three deliveries once the server is up")
	w.waitStatus(touba.StatusDone, orders, 3, 30*time.Second)
	got := lap.received()
	slices.Sort(got)
	if !slices.Equal(got, []string{"o-1", "o-2", "o-3"}) {
		t.Fatalf("received %v, want each of o-1, o-2, o-3 once", got)
	}
}

// TestListenReplay: a done entry reaches the laptop again as a new run.
// queue replay refuses a done entry (SPEC §6: replay is for failed,
// parked and cancelled entries) and names the way that SPEC §6 gives:
// the stored redelivery replayed under a fresh event id.
func TestListenReplay(t *testing.T) {
	w := newWorld(t, sqliteBackend, touba.RetryIdempotencyKey, 1500)
	w.start("--workers", "4")
	lap := newLaptop(t)
	w.send(orders, "o-1")
	startListen(t, w, lap, lap.srv.URL+"/webhooks")
	testkit.WaitFor(t, 30*time.Second, func() bool { return len(lap.received()) == 1 }, "o-1 to arrive")
	w.waitStatus(touba.StatusDone, orders, 1, 30*time.Second)
	first := lap.webhookID("o-1")

	// The sender delivering o-1 again is answered as a duplicate and the
	// delivery stored; queue replay of the done entry says to replay it.
	if status, _ := testkit.Post(t, w.d.URL()+"/triggers/"+orders, "o-1", `{"order_id":"o-1"}`); status != http.StatusOK {
		t.Fatalf("redelivery: %d", status)
	}
	var rows []struct {
		DeliveryID string `json:"delivery_id"`
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		w.cli(&rows, "deliveries", "ls", "--rejected", "--code", "TriggerReplayRejected", "--since", "1h")
		return len(rows) == 1
	}, "the redelivery in the deliveries log")
	cmd := exec.Command(testkit.Binary(t), "queue", "replay", w.ids["o-1"], "--admin-socket", w.admin)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	if err := cmd.Run(); err == nil || !strings.Contains(stdout.String(), "deliveries replay "+rows[0].DeliveryID+" --new-event-id") {
		t.Fatalf("queue replay of a done entry: %v\n%s", err, stdout.String())
	}
	var rep struct {
		QueueID string `json:"queue_id"`
		Status  string `json:"status"`
	}
	w.cli(&rep, "deliveries", "replay", rows[0].DeliveryID, "--new-event-id")
	if rep.Status != "enqueued" || rep.QueueID == w.ids["o-1"] {
		t.Fatalf("deliveries replay --new-event-id: %+v", rep)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return len(lap.received()) == 2 }, "the replay to reach the laptop")
	if second := lap.webhookID("o-1"); second == first || !strings.HasPrefix(second, rep.QueueID) {
		t.Fatalf("webhook-id of the replay %q (first %q, new entry %s)", second, first, rep.QueueID)
	}
	lap.mu.Lock()
	defer lap.mu.Unlock()
	if len(lap.bad) > 0 {
		t.Fatalf("bad signatures: %v", lap.bad)
	}
}
