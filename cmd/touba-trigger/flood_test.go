package main_test

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/touba/touba-trigger/internal/testkit"
)

// floodProgram: an open trigger for valid deliveries, a signed one whose
// bad signatures make 401 rows (with the request's headers), and a small
// one (1 MiB) for oversized bodies.
const floodProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:e2e/Orders", "source": {"kind": "webhook"},
   "steps": [{"id": "post", "tool": "tool:e2e/Post", "input": {"order": {"$ref": "/event/body"}}}]},
  {"ref": "trigger:e2e/Signed", "source": {"kind": "webhook",
     "verify": {"scheme": "hmac-sha256", "secret": {"env": "FLOOD_SECRET"}}},
   "steps": [{"id": "post", "tool": "tool:e2e/Post", "input": {"order": {"$ref": "/event/body"}}}]},
  {"ref": "trigger:e2e/Small", "source": {"kind": "webhook", "max_body_bytes": 1048576},
   "steps": [{"id": "post", "tool": "tool:e2e/Post", "input": {"order": {"$ref": "/event/body"}}}]}]}`

var floodEnv = []string{"FLOOD_SECRET=flood-secret-for-tests"}

// vmHWM reads the peak resident set of pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// postValid posts one valid delivery and returns the status and latency.
func postValid(c *http.Client, url, id string) (int, time.Duration, error) {
	start := time.Now()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"n":"`+id+`"}`))
	req.Header.Set("X-Touba-Event-Id", id)
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}

func quantiles(d []time.Duration) string {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	q := func(p float64) time.Duration { return d[int(p*float64(len(d)-1))].Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v p99 %v max %v (n=%d)", q(0.5), q(0.99), d[len(d)-1].Round(10*time.Microsecond), len(d))
}

// sendValid posts n valid deliveries one after the other; each must be
// answered 202 within the deadline. It returns their latencies.
func sendValid(t *testing.T, url, prefix string, n int) []time.Duration {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second}
	var lat []time.Duration
	for i := 0; i < n; i++ {
		status, d, err := postValid(c, url, fmt.Sprintf("%s-%04d", prefix, i))
		if err != nil || status != 202 {
			t.Fatalf("valid delivery %s-%d: %d %v (deadline 20 s)", prefix, i, status, err)
		}
		lat = append(lat, d)
	}
	return lat
}

// Bounds of TestDeliveryLogFlood, with --delivery-log-max-bytes 8 MiB.
const (
	floodLogMaxBytes = 8 << 20
	floodStateMax    = 24 << 20 // the state file: the log's 8 MiB, SQLite's own overhead and free pages
	floodWALMax      = 40 << 20 // its WAL: the 16 MB checkpoint threshold plus a few 4 MiB batches
	floodRSSMax      = 160 << 20
	floodRequests    = 3000 // each carries 60 KB of path or headers: 180 MB if the log kept it
)

// TestDeliveryLogFlood: the real daemon under a flood of rejected requests
// with 60 KB paths (404, 405) and 60 KB headers (401) keeps its state file
// and its memory under stated bounds, and valid deliveries posted during
// the flood are each acknowledged 202.
func TestDeliveryLogFlood(t *testing.T) {
	f := writeFiles(t, floodProgram, e2eManifest)
	d := testkit.Start(t, floodEnv, f.serveArgs("--workers", "0",
		"--delivery-log-max-bytes", strconv.Itoa(floodLogMaxBytes))...)
	base := d.URL()

	quiet, flooded, sent := flood(t, base)
	st, err := sql.Open("sqlite3", "file:"+f.state+"?mode=ro&_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var rows, sum, maxRef, maxHdr int64
	// Another process writes the rows: the row itself is what to wait on.
	testkit.WaitFor(t, 30*time.Second, func() bool {
		var end int
		if err := st.QueryRow(`SELECT COUNT(*) FROM deliveries WHERE trigger_ref = 'trigger:flood-end'`).Scan(&end); err != nil {
			t.Fatal(err)
		}
		return end > 0
	}, "the last rejection's row")
	if err := st.QueryRow(`SELECT COUNT(*), coalesce(SUM(size), 0), coalesce(MAX(length(trigger_ref)), 0),
		coalesce(MAX(length(headers)), 0) FROM deliveries`).Scan(&rows, &sum, &maxRef, &maxHdr); err != nil {
		t.Fatal(err)
	}
	hwm := vmHWM(t, d.Cmd.Process.Pid)
	main, wal := fileSize(f.state), fileSize(f.state+"-wal")
	t.Logf("valid deliveries, quiet: %s", quantiles(quiet))
	t.Logf("valid deliveries, flood: %s", quantiles(flooded))
	t.Logf("flood: %d requests of 60 KB; log: %d rows, %d bytes counted, longest trigger_ref %d, headers %d",
		sent, rows, sum, maxRef, maxHdr)
	t.Logf("state file %.1f MiB, WAL %.1f MiB; daemon VmHWM %.1f MiB",
		float64(main)/(1<<20), float64(wal)/(1<<20), float64(hwm)/(1<<20))
	if sum > floodLogMaxBytes || maxRef > 256 || maxHdr > 8192+1024 {
		t.Errorf("log holds %d bytes (bound %d), trigger_ref up to %d bytes, headers up to %d", sum, floodLogMaxBytes, maxRef, maxHdr)
	}
	if main > floodStateMax || wal > floodWALMax {
		t.Errorf("state file %d bytes (bound %d), WAL %d (bound %d)", main, floodStateMax, wal, floodWALMax)
	}
	if hwm > floodRSSMax {
		t.Errorf("daemon VmHWM %d bytes, bound %d", hwm, floodRSSMax)
	}
}

// flood sends valid deliveries (200 before, 200 during) and, meanwhile, at
// least floodRequests rejected requests of 60 KB (404, 405, 401), then one
// rejection to trigger:flood-end that marks the end of the log. It returns
// the valid deliveries' latencies and how many flood requests were sent.
func flood(t *testing.T, base string) (quiet, flooded []time.Duration, sent int64) {
	t.Helper()
	quiet = sendValid(t, base+"/triggers/e2e/Orders", "quiet", 200)

	longPath := "/triggers/" + strings.Repeat("p", 60_000)
	pad := strings.Repeat("h", 60_000)
	// The flood goes on until the valid deliveries are all answered and
	// at least floodRequests were sent.
	var count, unexpected atomic.Int64
	stop, reached := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := &http.Client{Timeout: 30 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if count.Add(1) == floodRequests {
					close(reached)
				}
				var req *http.Request
				want := 0
				switch (w + i) % 3 {
				case 0:
					req, _ = http.NewRequest("POST", base+longPath, strings.NewReader("{}"))
					want = 404
				case 1:
					req, _ = http.NewRequest("GET", base+longPath, nil)
					want = 405
				default:
					req, _ = http.NewRequest("POST", base+"/triggers/e2e/Signed", strings.NewReader("{}"))
					req.Header.Set("X-Pad", pad)
					req.Header.Set("X-Signature", "sha256=00")
					want = 401
				}
				resp, err := c.Do(req)
				if err != nil {
					unexpected.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want {
					unexpected.Add(1)
				}
			}
		}(w)
	}
	flooded = sendValid(t, base+"/triggers/e2e/Orders", "flood", 200)
	<-reached
	close(stop)
	wg.Wait()
	if n := unexpected.Load(); n > 0 {
		t.Errorf("%d flood requests not answered with their 404/405/401", n)
	}

	// A last rejection marks the end: once its row is written, every row
	// logged before it was written or dropped (the writer is in order).
	if resp, err := http.Post(base+"/triggers/flood-end", "application/json", strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	return quiet, flooded, count.Load()
}

// The bound of TestOversizedBodies on the daemon's peak memory: 40 bodies
// of 8 MiB would be 320 MiB if held.
const oversizedRSSMax = 96 << 20

// TestOversizedBodies: 40 clients at once each write a whole 8 MiB body to
// a 1 MiB trigger before reading: every one reads 413
// TriggerPayloadTooLarge, and the daemon holds none of the bodies.
func TestOversizedBodies(t *testing.T) {
	f := writeFiles(t, floodProgram, e2eManifest)
	d := testkit.Start(t, floodEnv, f.serveArgs("--workers", "0")...)
	const clients, size = 40, 8 << 20
	body := []byte(strings.Repeat("a", size))
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	start := time.Now()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- oversizedPost(d.Addr, body)
		}()
	}
	wg.Wait()
	close(errs)
	took := time.Since(start)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	hwm := vmHWM(t, d.Cmd.Process.Pid)
	t.Logf("%d clients x %d MiB: done in %v; daemon VmHWM %.1f MiB", clients, size>>20, took.Round(time.Millisecond), float64(hwm)/(1<<20))
	if hwm > oversizedRSSMax {
		t.Errorf("daemon VmHWM %d bytes, bound %d", hwm, oversizedRSSMax)
	}
}

func oversizedPost(addr string, body []byte) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := fmt.Fprintf(c, "POST /triggers/e2e/Small HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(body)); err != nil {
		return err
	}
	if _, err := c.Write(body); err != nil {
		return fmt.Errorf("writing the body: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	defer resp.Body.Close()
	var a struct {
		Error struct{ Code string } `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&a)
	if resp.StatusCode != 413 || a.Error.Code != "TriggerPayloadTooLarge" {
		return fmt.Errorf("answer %d %q, want 413 TriggerPayloadTooLarge", resp.StatusCode, a.Error.Code)
	}
	return nil
}
