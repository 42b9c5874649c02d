package crash_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// The journal and the queue are read only while no daemon runs: those
// SQLite files are the daemon's own (SPEC §2). The remote's file is the
// test's, read at any time.

// remoteLine is one request the remote recorded (testdata/remote.Line).
type remoteLine struct {
	EffectID  string          `json:"effect_id"`
	CallID    string          `json:"call_id"`
	Attempt   int             `json:"attempt"`
	RetryMode string          `json:"retry_mode"`
	Kind      string          `json:"kind"`
	Receipt   string          `json:"receipt"`
	Input     json.RawMessage `json:"input"`
}

// String keeps failure messages short: the input is left out.
func (l remoteLine) String() string {
	return fmt.Sprintf("{%s %s attempt=%d receipt=%s call=%s}", l.EffectID, l.Kind, l.Attempt, l.Receipt, l.CallID)
}

// remoteLines reads the remote's file; none yet is no lines.
func (w *world) remoteLines() []remoteLine {
	w.t.Helper()
	data, err := os.ReadFile(w.remote)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		w.t.Fatal(err)
	}
	var out []remoteLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l remoteLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			w.t.Fatalf("remote file line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// effects reads the journal's effects and their audit trails. Only with no
// daemon running: the journal file is the daemon's own.
func (w *world) effects() (map[string]touba.Effect, map[string][]touba.EffectEvent) {
	w.t.Helper()
	if w.db != "" {
		return w.pgEffects()
	}
	list, events := testkit.Effects(w.t, w.journal)
	effects := map[string]touba.Effect{}
	for _, e := range list {
		effects[e.EffectID] = e
	}
	return effects, events
}

// entries reads the queue, by queue id. Only with no daemon running.
func (w *world) entries() map[string]entry {
	w.t.Helper()
	out := map[string]entry{}
	if w.db != "" {
		return w.pgEntries()
	}
	for _, e := range testkit.Entries(w.t, w.queue) {
		out[e.QueueID] = entry{EventID: e.EventID, Status: e.Status, ErrorCode: e.ErrorCode}
	}
	return out
}

// entry is what the checks need of a queue entry (LeaseOwner: on
// PostgreSQL only, the node holding a running entry).
type entry struct{ EventID, Status, ErrorCode, LeaseOwner string }
