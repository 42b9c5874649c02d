package keys_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// program: one trigger debounced per key, one limited per key, and the
// flood's trigger, which has neither.
const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:k/Debounced", "source": {"kind": "webhook"},
   "debounce": {"key": {"$ref": "/event/body/key"}, "window_ms": 200, "max_wait_ms": 1000},
   "steps": [{"id": "write", "tool": "tool:k/Write", "input": {"key": {"$ref": "/event/body/key"}}}]},
  {"ref": "trigger:k/Keyed", "source": {"kind": "webhook"},
   "concurrency": {"key": {"$ref": "/event/body/key"}, "max": 1},
   "steps": [{"id": "write", "tool": "tool:k/Write", "input": {"key": {"$ref": "/event/body/key"}}}]},
  {"ref": "trigger:k/Flood", "source": {"kind": "webhook"},
   "steps": [{"id": "write", "tool": "tool:k/Write", "input": {"key": {"$ref": "/event/body/key"}}}]}]}`

// startDaemon writes the program and a manifest binding the tool to a
// remote that answers every call, and serves them on SQLite files, or on
// dsn when it is not "".
func startDaemon(t *testing.T, dsn string) *testkit.Daemon {
	t.Helper()
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"stored": true}`))
	}))
	t.Cleanup(remote.Close)
	dir := t.TempDir()
	prog, man := filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json")
	manifest := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {"tool:k/Write": {
	  "handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 10}, "credentials": {"hmac_secret": {"env": "KEYS_HMAC"}}},
	  "timeout_ms": 20000, "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`, remote.URL)
	for path, content := range map[string]string{prog: program, man: manifest} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"serve", prog, "--manifest", man, "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--admin-socket", "", "--log-level", "info", "--workers", "4"}
	if dsn != "" {
		args = append(args, "--database", dsn, "--node-id", "keys-1", "--lease-ttl", "30s")
	} else {
		args = append(args, "--queue", filepath.Join(dir, "q.sqlite"), "--state", filepath.Join(dir, "s.sqlite"),
			"--effect-journal", filepath.Join(dir, "j.sqlite"))
	}
	d := testkit.Start(t, []string{"KEYS_HMAC=keys-test-secret"}, args...)
	t.Cleanup(func() {
		d.Signal(syscall.SIGTERM)
		d.Wait(30 * time.Second)
	})
	return d
}

// reply is intake's answer to one delivery.
type reply struct {
	Status int
	Answer string `json:"status"`
	Error  struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

var client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// post sends one delivery of trigger name whose body's key is key.
func post(d *testkit.Daemon, name, eventID, key string) (reply, error) {
	body, _ := json.Marshal(map[string]string{"key": key})
	req, err := http.NewRequest(http.MethodPost, d.URL()+"/triggers/"+name, strings.NewReader(string(body)))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Touba-Event-Id", eventID)
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	r := reply{Status: resp.StatusCode}
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

// randomLetters are n letters no compression shortens much: what defeats
// TOAST's compression of an index row on PostgreSQL (a run of one letter
// compresses to a few bytes, and a fresh test of it passes).
func randomLetters(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rand.IntN(26))
	}
	return string(b)
}

// oversizedRefusedAlone posts, while 200 deliveries to the flood's
// trigger are in flight, deliveries whose debounce key or concurrency key
// is 6,000 random letters (6,002 bytes of JSON): each is answered 422
// KeyTooLong naming its key, its length and the limit, and every flood
// delivery 202, however the commit batches grouped them.
func oversizedRefusedAlone(t *testing.T, dsn string) {
	d := startDaemon(t, dsn)
	const flood, rounds = 200, 5
	type sent struct {
		name, id string
		r        reply
		err      error
	}
	out := make(chan sent, flood+2*rounds)
	var wg sync.WaitGroup
	send := func(name, id, key string) {
		defer wg.Done()
		r, err := post(d, name, id, key)
		out <- sent{name, id, r, err}
	}
	for i := range flood {
		wg.Add(1)
		go send("k/Flood", fmt.Sprintf("flood-%03d", i), fmt.Sprintf("f%d", i%7))
		if i%(flood/rounds) == flood/rounds/2 {
			// In the middle of the flood, so that they share its batches.
			wg.Add(2)
			go send("k/Debounced", fmt.Sprintf("debounced-%d", i), randomLetters(6000))
			go send("k/Keyed", fmt.Sprintf("keyed-%d", i), randomLetters(6000))
		}
	}
	wg.Wait()
	close(out)
	var refused, accepted int
	for s := range out {
		if s.err != nil {
			t.Errorf("%s %s: %v", s.name, s.id, s.err)
			continue
		}
		if s.name == "k/Flood" {
			if s.r.Status != http.StatusAccepted || s.r.Answer != "enqueued" {
				t.Errorf("flood delivery %s: %d %+v, want 202 enqueued", s.id, s.r.Status, s.r)
				continue
			}
			accepted++
			continue
		}
		which := map[string]string{"k/Debounced": "debounce.key /event/body/key", "k/Keyed": "concurrency.key /event/body/key"}[s.name]
		if s.r.Status != http.StatusUnprocessableEntity || s.r.Error.Code != "KeyTooLong" {
			t.Errorf("%s %s (6,000 letters): %d %+v, want 422 KeyTooLong", s.name, s.id, s.r.Status, s.r)
			continue
		}
		for _, want := range []string{which, "6002 bytes", "1024"} {
			if !strings.Contains(s.r.Error.Message, want) {
				t.Errorf("%s %s: message %q does not say %q", s.name, s.id, s.r.Error.Message, want)
			}
		}
		refused++
	}
	if accepted != flood || refused != 2*rounds {
		t.Fatalf("%d of %d flood deliveries accepted, %d of %d oversized refused", accepted, flood, refused, 2*rounds)
	}
	// The daemon is sound after: a delivery of a key within the limit is
	// accepted on each trigger.
	for _, name := range []string{"k/Debounced", "k/Keyed", "k/Flood"} {
		if r, err := post(d, name, "after-"+name, randomLetters(1000)); err != nil || r.Status != http.StatusAccepted {
			t.Fatalf("%s after the flood: %+v %v, want 202", name, r, err)
		}
	}
}

func TestOversizedKeysRefusedAloneSQLite(t *testing.T) {
	t.Parallel()
	oversizedRefusedAlone(t, "")
}

func TestOversizedKeysRefusedAlonePostgres(t *testing.T) {
	t.Parallel()
	if ok, why := pgtest.Available(); !ok {
		t.Skip("PostgreSQL 15 not installed: " + why)
	}
	oversizedRefusedAlone(t, pgtest.New(t))
}
