package gather_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// Issue 43: a carrier's run loaded every merged body and parsed them all
// into /events, about 4.5-5 times the bodies at its peak; 10,000 deliveries
// of 40 KB under a 1 GB limit died of it, and so did every restart. These
// tests send one large gathering to one key through the real binary and
// read the daemon's peak resident memory (VmHWM of /proc/<pid>/status).

// refBig batches one key's deliveries into one run of a step that reads
// /events (the whole gathering).
const refBig = "trigger:g/Big"

// bigWorld is a world of refBig alone: a batch of size deliveries, whose
// window is an hour (the batch starts when it is full, by max_size or
// max_bytes) unless window says otherwise, and whose max_bytes is maxBytes
// (0: none in the program, the default); the step writes /events to
// remote.
func bigWorld(t *testing.T, size int, maxBytes int64, window time.Duration, remoteURL string) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, dir: dir, program: filepath.Join(dir, "program.air.json"),
		manifest: filepath.Join(dir, "touba.manifest.json"), queue: filepath.Join(dir, "q.sqlite"),
		state: filepath.Join(dir, "s.sqlite"), journal: filepath.Join(dir, "j.sqlite"), sock: filepath.Join(dir, "admin.sock")}
	limit := ""
	if maxBytes > 0 {
		limit = fmt.Sprintf(`, "max_bytes": %d`, maxBytes)
	}
	program := fmt.Sprintf(`{"air_version": "touba-air-v1", "triggers": [
	  {"ref": %q, "source": {"kind": "webhook", "max_body_bytes": 1048576},
	   "batch": {"key": {"$ref": "/event/body/key"}, "max_size": %d, "window_ms": %d%s},
	   "steps": [{"id": "write", "tool": "tool:g/Write", "input": {"key": {"$ref": "/event/body/key"}, "events": {"$ref": "/events"}}}],
	   "retry": {"max_attempts": 20, "initial_interval_ms": 20, "max_interval_ms": 200}}]}`, refBig, size, window.Milliseconds(), limit)
	manifest := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {"tool:g/Write": {
	  "handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 120}, "credentials": {"hmac_secret": {"env": "GATHER_HMAC"}}},
	  "timeout_ms": 300000, "max_payload_bytes": 1073741824,
	  "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`, remoteURL)
	for path, content := range map[string]string{w.program: program, w.manifest: manifest} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// bigRemote answers the step's calls: it decodes each (the seqs of its
// events), and holds the first call until release is closed, so the test
// can read the daemon's memory while its run is at its peak and kill it
// there.
type bigRemote struct {
	srv     *httptest.Server
	arrived chan struct{} // closed when the first call's body was read
	release chan struct{}
	once    sync.Once

	mu    sync.Mutex
	calls [][]int // each call's seqs
}

func newBigRemote(t *testing.T) *bigRemote {
	r := &bigRemote{arrived: make(chan struct{}), release: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		r.once.Do(func() { close(r.release) })
		r.srv.Close()
	})
	return r
}

func (r *bigRemote) serve(w http.ResponseWriter, req *http.Request) {
	var in struct {
		Input struct {
			Events []struct {
				Body struct {
					Seq int `json:"seq"`
				} `json:"body"`
			} `json:"events"`
		} `json:"input"`
	}
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	seqs := make([]int, len(in.Input.Events))
	for i, e := range in.Input.Events {
		seqs[i] = e.Body.Seq
	}
	r.mu.Lock()
	first := len(r.calls) == 0
	r.calls = append(r.calls, seqs)
	r.mu.Unlock()
	if first {
		close(r.arrived)
		<-r.release
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"stored": true}`))
}

func (r *bigRemote) got() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]int(nil), r.calls...)
}

// vmHWM is the peak resident set of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// bigBody is delivery seq's body: about size bytes of JSON.
func bigBody(seq, size int) string {
	head := fmt.Sprintf(`{"key": "big", "seq": %d, "pad": "`, seq)
	return head + strings.Repeat(string(rune('a'+seq%26)), size-len(head)-2) + `"}`
}

// postBig sends deliveries from to to (seqs) of size bytes to refBig, 8
// at a time.
func postBig(t *testing.T, d *testkit.Daemon, from, to, size int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, to-from+1)
	sem := make(chan struct{}, 8)
	for i := from; i <= to; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(seq int) {
			defer func() { <-sem; wg.Done() }()
			req, _ := http.NewRequest(http.MethodPost, d.URL()+"/triggers/g/Big", strings.NewReader(bigBody(seq, size)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Touba-Event-Id", fmt.Sprintf("big-%05d", seq))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				errs <- fmt.Errorf("delivery %d: %d", seq, resp.StatusCode)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestLargeGatheringPeakMemory: 2,000 deliveries of 40 KB (80 MB of
// bodies) batched into one run whose step reads /events. The daemon's peak
// resident memory while the run's call is in flight stays under three
// times the bodies plus a base; killed there (SIGKILL), the restarted
// daemon comes up, runs the gathering again within the same bound, and
// finishes it: the remote saw every delivery, in order.
func TestLargeGatheringPeakMemory(t *testing.T) {
	const n, size = 2000, 40 << 10
	const bodies = int64(n * size)
	const bound = 3*bodies + 96<<20
	r := newBigRemote(t)
	w := bigWorld(t, n, 128<<20, time.Hour, r.srv.URL)
	d := w.start("")
	postBig(t, d, 1, n-1, size)
	t.Logf("peak RSS after intake of %d deliveries: %d MiB", n-1, vmHWM(t, d.Cmd.Process.Pid)>>20)
	postBig(t, d, n, n, size) // fills the batch: the run starts
	select {
	case <-r.arrived:
	case <-time.After(waitLong):
		t.Fatalf("the gathering's run did not reach the remote\n%s", d.Log())
	}
	peak := vmHWM(t, d.Cmd.Process.Pid)
	t.Logf("peak RSS with the run's call in flight: %d MiB (bodies %d MiB, bound %d MiB)", peak>>20, bodies>>20, bound>>20)
	if peak > bound {
		t.Errorf("peak RSS %d MiB, want at most %d MiB (3x the %d MiB of bodies + 96 MiB)", peak>>20, bound>>20, bodies>>20)
	}
	d.Kill()

	d = w.start("")
	testkit.WaitFor(t, waitLong, func() bool { return len(r.got()) >= 2 }, "the restarted daemon's run to reach the remote")
	r.once.Do(func() { close(r.release) })
	testkit.WaitFor(t, waitLong, func() bool {
		var done []entry
		w.cli(&done, "queue", "ls", "--trigger", refBig, "--status", "done")
		return len(done) == 1
	}, "the carrier done")
	again := vmHWM(t, d.Cmd.Process.Pid)
	t.Logf("peak RSS of the restarted daemon: %d MiB", again>>20)
	if again > bound {
		t.Errorf("restarted daemon's peak RSS %d MiB, want at most %d MiB", again>>20, bound>>20)
	}
	for i, seqs := range r.got() {
		sorted := slices.Sorted(slices.Values(seqs))
		if len(seqs) != n || sorted[0] != 1 || sorted[n-1] != n || len(slices.Compact(sorted)) != n {
			t.Fatalf("call %d saw %d events, want each of the %d once", i, len(seqs), n)
		}
	}
	w.stop()
}

// TestFullGatheringPeakMemory is issue 43's own case, run by hand: 10,000
// deliveries of 40 KB (400 MB of bodies) to one key, the step reading
// /events, under the 1 GB that killed the daemon before. Set
// TOUBA_GATHER_FULL=1 to run it; TOUBA_GATHER_FULL_MAX_BYTES sets the
// batch's max_bytes (default: none in the program, so 64 MiB, and the key's
// deliveries make several runs; 1073741824 makes it one gathering of them
// all). It logs the daemon's peak RSS and the runs' sizes.
func TestFullGatheringPeakMemory(t *testing.T) {
	if os.Getenv("TOUBA_GATHER_FULL") == "" {
		t.Skip("set TOUBA_GATHER_FULL=1 to run 10,000 deliveries of 40 KB (a few minutes, GBs in the test process)")
	}
	const n, size = 10_000, 40 << 10
	var maxBytes int64
	if v := os.Getenv("TOUBA_GATHER_FULL_MAX_BYTES"); v != "" {
		var err error
		if maxBytes, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	r := newBigRemote(t)
	r.once.Do(func() { close(r.release) }) // no call is held
	// The window outlasts intake (about 30 s here), so that with max_bytes
	// 1 GiB the key's deliveries are one gathering; with the default, the
	// last gathering, under max_bytes, starts at its window's end.
	w := bigWorld(t, n, maxBytes, 2*time.Minute, r.srv.URL)
	d := w.start("")
	start := time.Now()
	postBig(t, d, 1, n, size)
	t.Logf("intake of %d deliveries of %d KiB: %s, peak RSS so far %d MiB", n, size>>10, time.Since(start).Round(time.Millisecond),
		vmHWM(t, d.Cmd.Process.Pid)>>20)
	var seen int
	testkit.WaitFor(t, 10*time.Minute, func() bool {
		seen = 0
		for _, c := range r.got() {
			seen += len(c)
		}
		if seen < n {
			return false
		}
		var done []entry
		w.cli(&done, "queue", "ls", "--trigger", refBig, "--status", "done", "--limit", "10000")
		return len(done) == len(r.got())
	}, "every delivery run")
	var sizes []int
	all := map[int]bool{}
	for _, c := range r.got() {
		sizes = append(sizes, len(c))
		for _, s := range c {
			all[s] = true
		}
	}
	peak := vmHWM(t, d.Cmd.Process.Pid)
	t.Logf("max_bytes %d: %d runs of %v deliveries; %d distinct; daemon peak RSS %d MiB (bodies %d MiB); %s in all",
		maxBytes, len(sizes), sizes, len(all), peak>>20, (n*size)>>20, time.Since(start).Round(time.Millisecond))
	if len(all) != n || seen != n {
		t.Errorf("the runs saw %d deliveries (%d distinct), want each of %d once", seen, len(all), n)
	}
	// Under the 1 GB with the default max_bytes; with a larger one,
	// three times what one gathering holds, plus a base.
	bound := int64(1 << 30)
	if maxBytes > 0 {
		bound = max(bound, 3*min(int64(n*size), maxBytes)+96<<20)
	}
	if peak > bound {
		t.Errorf("peak RSS %d MiB, want at most %d MiB", peak>>20, bound>>20)
	}
	w.stop()
}
