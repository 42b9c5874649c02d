package httpbinding_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// counting is a real HTTP server on 127.0.0.1 that counts the connections
// it accepts and answers 201.
type counting struct {
	*httptest.Server
	conns atomic.Int32
	last  atomic.Value // the last request line
}

func newCounting(t *testing.T) *counting {
	t.Helper()
	c := &counting{}
	c.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.last.Store(r.Method + " " + r.URL.String() + " " + r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusCreated)
	}))
	c.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.conns.Add(1)
		}
	}
	c.Start()
	t.Cleanup(c.Close)
	return c
}

// ended matches `queue show` of an entry that ended done or failed.
var ended = regexp.MustCompile(`(?m)^status +(done|failed)$`)

// run starts the real binary on an http binding to url with extra flags
// and environment, posts one order, waits until its entry ends, stops the
// daemon and returns the entry and what `queue show` printed of it.
func run(t *testing.T, url string, env []string, flags ...string) (*touba.Delivery, string) {
	t.Helper()
	dir := t.TempDir()
	queue := filepath.Join(dir, "q.sqlite")
	args := append([]string{"serve", writeFile(t, dir, "program.air.json", program),
		"--manifest", writeFile(t, dir, "touba.manifest.json", manifest(url)),
		"--queue", queue, "--state", filepath.Join(dir, "s.sqlite"), "--effect-journal", filepath.Join(dir, "j.sqlite"),
		"--admin-socket", filepath.Join(dir, "admin.sock"), "--listen", "127.0.0.1:0", "--metrics-listen", ""}, flags...)
	d := testkit.Start(t, append([]string{"HTTPB_ORDERS_TOKEN=" + ordersToken, "NO_PROXY=", "no_proxy="}, env...), args...)
	status, id := testkit.Post(t, d.URL()+"/triggers/shop/Paid", "evt-1", `{"order": "A-1", "amount": 2000}`)
	if status != http.StatusAccepted {
		t.Fatalf("post: %d", status)
	}
	var show string
	testkit.WaitFor(t, 30*time.Second, func() bool {
		out, _ := exec.Command(testkit.Binary(t), "queue", "show", id, "--admin-socket", filepath.Join(dir, "admin.sock")).Output()
		show = string(out)
		return ended.MatchString(show)
	}, "the entry to end")
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, d.Log())
	}
	if strings.Contains(d.Log(), ordersToken) || strings.Contains(show, ordersToken) {
		t.Errorf("the daemon's log or queue show holds the token")
	}
	for _, e := range testkit.Entries(t, queue) {
		if e.QueueID == id {
			return e, show
		}
	}
	t.Fatalf("entry %s not found", id)
	return nil, ""
}

// --egress-deny 127.0.0.0/8 (or TOUBA_EGRESS_DENY) refuses loopback in the
// real binary: the entry fails EgressForbidden and the listener never sees
// a connection; without it the same binding reaches the listener.
func TestEgressDenyThroughTheBinary(t *testing.T) {
	api := newCounting(t)
	url := api.URL + "/orders/{/order_id}/payment"
	for name, env := range map[string][]string{"--egress-deny": nil, "TOUBA_EGRESS_DENY": {"TOUBA_EGRESS_DENY=10.0.0.0/8,127.0.0.0/8"}} {
		var flags []string
		if env == nil {
			flags = []string{"--egress-deny", "127.0.0.0/8"}
		}
		e, show := run(t, url, env, flags...)
		if e.Status != touba.StatusFailed || e.ErrorCode != touba.EEgressForbidden || !strings.Contains(show, "--egress-deny 127.0.0.0/8") {
			t.Errorf("%s: entry %s %s, want failed EgressForbidden naming the range:\n%s", name, e.Status, e.ErrorCode, show)
		}
	}
	if n := api.conns.Load(); n != 0 {
		t.Fatalf("the listener accepted %d connections, want none", n)
	}
	if e, _ := run(t, url, nil); e.Status != touba.StatusDone || api.conns.Load() == 0 {
		t.Fatalf("without --egress-deny: entry %s %s, %d connections", e.Status, e.ErrorCode, api.conns.Load())
	}
	if got := api.last.Load(); got != "PUT /orders/A-1/payment Bearer "+ordersToken {
		t.Fatalf("the API received %v", got)
	}
}

// HTTP_PROXY is honoured: the daemon sends the request to the proxy, and
// the guard checks the proxy's address (with loopback denied, nothing
// reaches the proxy) and, before the proxy is used, the target: a refused
// target (here the metadata address, issue 44) never reaches the proxy,
// nor its Authorization header. The allowed target is a literal address
// (TEST-NET-2) the counting proxy answers for: a name must resolve here.
func TestProxyThroughTheBinary(t *testing.T) {
	proxy := newCounting(t)
	url := "http://198.51.100.7/orders/{/order_id}/payment"
	env := []string{"HTTP_PROXY=" + proxy.URL, "http_proxy=" + proxy.URL}
	if e, show := run(t, url, env, "--egress-deny", "127.0.0.0/8"); e.Status != touba.StatusFailed || e.ErrorCode != touba.EEgressForbidden {
		t.Fatalf("denied proxy: entry %s %s\n%s", e.Status, e.ErrorCode, show)
	}
	if e, show := run(t, "http://169.254.169.254/latest/meta-data/{/order_id}", env); e.Status != touba.StatusFailed ||
		e.ErrorCode != touba.EEgressForbidden || !strings.Contains(show, "cloud metadata") {
		t.Fatalf("refused target: entry %s %s\n%s", e.Status, e.ErrorCode, show)
	}
	if n := proxy.conns.Load(); n != 0 {
		t.Fatalf("the proxy accepted %d connections, want none", n)
	}
	if e, show := run(t, url, env); e.Status != touba.StatusDone {
		t.Fatalf("through the proxy: entry %s %s\n%s", e.Status, e.ErrorCode, show)
	}
	if got := proxy.last.Load(); got != "PUT http://198.51.100.7/orders/A-1/payment Bearer "+ordersToken {
		t.Fatalf("the proxy received %v", got)
	}
}
