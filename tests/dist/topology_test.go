package dist_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// haproxyConfig is deploy/haproxy-hosts.cfg (the walkthrough without
// containers) with its addresses moved to loopback: the listeners on lb
// and stats, the servers on the nodes' addresses. Everything else (checks,
// retries, timeouts) is the file's; TestHAProxyConfigsAgree holds the
// compose one to the same.
func haproxyConfig(t *testing.T, lb, stats int, nodes map[string]string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(), "deploy", "haproxy-hosts.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for from, to := range map[string]string{
		"bind *:8080": fmt.Sprintf("bind 127.0.0.1:%d", lb),
		"bind *:8404": fmt.Sprintf("bind 127.0.0.1:%d", stats),
		// Logs to the test's pipe, not the host's syslog.
		"log /dev/log local0 info": "log stderr format raw local0 notice",
	} {
		if !strings.Contains(cfg, from) {
			t.Fatalf("deploy/haproxy-hosts.cfg has no %q", from)
		}
		cfg = strings.Replace(cfg, from, to, 1)
	}
	for name, addr := range nodes {
		re := regexp.MustCompile(`(?m)^(\s*server ` + name + `) \S+ `)
		if !re.MatchString(cfg) {
			t.Fatalf("deploy/haproxy-hosts.cfg has no server %s", name)
		}
		cfg = re.ReplaceAllString(cfg, "$1 "+addr+" ")
	}
	return cfg
}

// serverStatus reads each server's status (UP, DOWN, ...) of backend
// nodes from HAProxy's CSV status page.
func serverStatus(url string) map[string]string {
	out := map[string]string{}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url + ";csv")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	for _, line := range strings.Split(buf.String(), "\n") {
		f := strings.Split(line, ",")
		if len(f) > 17 && f[0] == "nodes" && f[1] != "BACKEND" {
			out[f[1]] = f[17]
		}
	}
	return out
}

// answer is one sender's request through the balancer.
type answer struct {
	sent, done time.Time
	status     int
	err        error
}

// The compose topology without containers: PostgreSQL (internal/pgtest),
// two real daemons on it with --database and their own --node-id (node1
// with the console, as in compose.yaml), and Debian's haproxy running
// deploy/haproxy.cfg (addresses moved to loopback) in front. Four senders
// post new deliveries through the balancer; node1 is killed with SIGKILL.
//
// What is tolerated: a request in flight at the kill, or sent between the
// kill and the moment HAProxy marks node1 down (its checks need up to
// fall x inter, about 2 s), may fail: node1 may have committed it and died
// before answering, and only the sender's retry (the same event id, so a
// duplicate, not a second entry) can settle it. HAProxy already retries
// refused connections and empty answers on node2, so few or none fail.
// Every request sent after the mark-down must be answered 202, and every
// 202 must name an entry the database holds.
func TestComposeTopologyWithoutContainers(t *testing.T) {
	haproxy := need(t, "haproxy", "haproxy")
	if ok, why := pgtest.Available(); !ok {
		t.Skip(why)
	}
	dsn := pgtest.New(t)
	dir, program, manifest := quickstart(t)
	token := filepath.Join(dir, "console-token")
	os.WriteFile(token, []byte("dist-test-console-token-0123456789\n"), 0o600)
	node := func(name string, extra ...string) *testkit.Daemon {
		args := []string{"serve", program, "--manifest", manifest, "--database", dsn, "--node-id", name,
			"--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", filepath.Join(dir, name+".sock")}
		return testkit.Start(t, nil, append(args, extra...)...)
	}
	n1 := node("node1", "--console-listen", "127.0.0.1:0", "--console-token-file", token)
	n2 := node("node2")

	lbPort, statsPort := freePort(t), freePort(t)
	cfgPath := filepath.Join(dir, "haproxy.cfg")
	os.WriteFile(cfgPath, []byte(haproxyConfig(t, lbPort, statsPort, map[string]string{"node1": n1.Addr, "node2": n2.Addr})), 0o644)
	run(t, dir, nil, haproxy, "-c", "-q", "-f", cfgPath)
	var hlog bytes.Buffer
	hp := exec.Command(haproxy, "-db", "-f", cfgPath)
	hp.Stdout, hp.Stderr = &hlog, &hlog
	if err := hp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hp.Process.Kill()
		hp.Wait()
		if t.Failed() {
			t.Logf("haproxy log:\n%s", hlog.String())
		}
	})
	lb := fmt.Sprintf("http://127.0.0.1:%d", lbPort)
	stats := fmt.Sprintf("http://127.0.0.1:%d/stats", statsPort)
	testkit.WaitFor(t, 20*time.Second, func() bool {
		s := serverStatus(stats)
		return s["node1"] == "UP" && s["node2"] == "UP"
	}, "haproxy to see both nodes up")

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var (
		mu      sync.Mutex
		answers []answer
		ids     []string
		wg      sync.WaitGroup
	)
	client := &http.Client{Timeout: 15 * time.Second}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				a := answer{sent: time.Now()}
				req, _ := http.NewRequest(http.MethodPost, lb+"/triggers/examples.billing/Invoice", strings.NewReader(`{"amount": 10}`))
				req.Header.Set("X-Touba-Event-Id", fmt.Sprintf("topo-%d-%d", w, i))
				resp, err := client.Do(req)
				a.done, a.err = time.Now(), err
				var qid string
				if err == nil {
					a.status = resp.StatusCode
					var buf bytes.Buffer
					buf.ReadFrom(resp.Body)
					resp.Body.Close()
					if m := regexp.MustCompile(`"queue_id":"([^"]+)"`).FindStringSubmatch(buf.String()); m != nil {
						qid = m[1]
					}
				}
				mu.Lock()
				answers = append(answers, a)
				if a.status == 202 {
					ids = append(ids, qid)
				}
				mu.Unlock()
			}
		}(w)
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(answers) }
	testkit.WaitFor(t, 20*time.Second, func() bool { return count() >= 200 }, "200 deliveries through both nodes")
	if strings.Count(n1.Log(), `"delivery enqueued"`) == 0 || strings.Count(n2.Log(), `"delivery enqueued"`) == 0 {
		t.Fatal("haproxy did not send deliveries to both nodes")
	}
	killAt := time.Now()
	n1.Kill()
	testkit.WaitFor(t, 20*time.Second, func() bool { return serverStatus(stats)["node1"] == "DOWN" }, "haproxy to mark node1 down")
	downAt := time.Now()
	after := count()
	testkit.WaitFor(t, 30*time.Second, func() bool { return count() >= after+200 }, "200 more deliveries after node1 is down")
	stop()
	wg.Wait()

	var before, inFlight, afterDown, failedInFlight int
	var bad []string
	for _, a := range answers {
		switch {
		case a.done.Before(killAt):
			before++
		case a.sent.After(downAt):
			afterDown++
		default:
			inFlight++ // sent before node1 was marked down, answered after the kill
		}
		if a.status == 202 {
			continue
		}
		what := fmt.Sprintf("sent %v after the kill: status %d, err %v", a.sent.Sub(killAt).Round(time.Millisecond), a.status, a.err)
		if !a.done.Before(killAt) && !a.sent.After(downAt) {
			failedInFlight++
			t.Logf("tolerated (in flight at the kill or before the mark-down): %s", what)
			continue
		}
		bad = append(bad, what)
	}
	t.Logf("%d answered before the kill, %d between the kill and the mark-down (%d failed, tolerated), %d sent after node1 was marked down %v after the kill",
		before, inFlight, failedInFlight, afterDown, downAt.Sub(killAt).Round(time.Millisecond))
	if len(bad) > 0 {
		t.Fatalf("%d requests answered other than 202 outside the kill window:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	if afterDown < 200 {
		t.Fatalf("only %d requests after the mark-down", afterDown)
	}

	// Every 202 is in the database: the CLI on it, through node2's socket.
	out := run(t, dir, nil, testkit.Binary(t), "queue", "ls", "--admin-socket", filepath.Join(dir, "node2.sock"),
		"--database", dsn, "--limit", strconv.Itoa(len(ids)+100), "--json")
	for _, id := range ids {
		if !strings.Contains(out, id) {
			t.Fatalf("queue id %s was answered 202 but is not in the database", id)
		}
	}
}

// TestHAProxyConfigsAgree: the compose configuration and the one for
// hosts differ only in how they find the nodes (compose's DNS, fixed
// addresses) and where they log, so the topology test of one holds for
// the other.
func TestHAProxyConfigsAgree(t *testing.T) {
	norm := func(name string) []string {
		b, err := os.ReadFile(filepath.Join(root(), "deploy", name))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		skip := false
		for _, l := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(strings.TrimSpace(l), "#") || strings.TrimSpace(l) == "":
				continue
			case strings.HasPrefix(l, "resolvers "):
				skip = true
				continue
			case skip && strings.HasPrefix(l, " "):
				continue
			}
			skip = false
			l = strings.TrimSuffix(l, " resolvers compose init-addr last,libc,none")
			l = regexp.MustCompile(`^(\s*server \S+) \S+ `).ReplaceAllString(l, "$1 ADDR ")
			l = regexp.MustCompile(`^(\s*log) .*`).ReplaceAllString(l, "$1 TARGET")
			out = append(out, l)
		}
		return out
	}
	a, b := norm("haproxy.cfg"), norm("haproxy-hosts.cfg")
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("deploy/haproxy.cfg and deploy/haproxy-hosts.cfg differ beyond addresses and logging:\n%s\n---\n%s",
			strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
}
