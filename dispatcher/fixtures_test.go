package dispatcher_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

// The tools of the test programs: toolW is the step under test, bound to
// either runner; toolThen is always the test handler process.
const (
	toolW    = "tool:t/Write"
	toolThen = "tool:t/Then"
	trigName = "t/run"
)

// runner is one way to bind toolW.
type runner struct {
	name string
	stub bool // accounting_stub; else the test handler process
}

var runners = []runner{{"accounting_stub", true}, {"process", false}}

// step is one step of a test program.
type step struct {
	ID    string
	Tool  string
	Input any
}

// program is a touba-air-v1 program with the single trigger trigName,
// short retry intervals and maxAttempts runs at most.
func program(tb testing.TB, maxAttempts int, steps ...step) string {
	tb.Helper()
	ss := make([]map[string]any, len(steps))
	for i, s := range steps {
		ss[i] = map[string]any{"id": s.ID, "tool": s.Tool}
		if s.Input != nil {
			ss[i]["input"] = s.Input
		}
	}
	return mustJSON(tb, map[string]any{
		"air_version": "touba-air-v1",
		"triggers": []any{map[string]any{
			"ref":    "trigger:" + trigName,
			"source": map[string]any{"kind": "webhook"},
			"steps":  ss,
			"retry":  map[string]any{"max_attempts": maxAttempts, "initial_interval_ms": 10, "max_interval_ms": 50},
		}},
	})
}

// binding is one tool binding of a test manifest.
type binding struct {
	Tool      string
	Stub      bool              // accounting_stub; else the test handler process
	Write     string            // retry mode of an external_write contract; "" for kind none
	TimeoutMS int               // 0: the manifest's default
	Secrets   map[string]string // handler env var -> env reference
}

// manifestOf is a touba-manifest-v1 manifest of bs.
func manifestOf(tb testing.TB, bs ...binding) string {
	tb.Helper()
	out := map[string]any{}
	for _, b := range bs {
		m := map[string]any{"effect_contract": map[string]any{"kind": "none"}}
		if b.Write != "" {
			m["effect_contract"] = map[string]any{"kind": "external_write", "retry_mode": b.Write}
		}
		if b.Stub {
			m["handler"] = map[string]any{"kind": "accounting_stub"}
		} else {
			m["handler"] = map[string]any{"kind": "process", "command": handlerBin, "args": []string{b.Tool}}
		}
		if b.TimeoutMS > 0 {
			m["timeout_ms"] = b.TimeoutMS
		}
		if len(b.Secrets) > 0 {
			sec := map[string]any{}
			for name, env := range b.Secrets {
				sec[name] = map[string]string{"env": env}
			}
			m["secrets"] = sec
		}
		out[b.Tool] = m
	}
	return mustJSON(tb, map[string]any{"manifest_version": "touba-manifest-v1", "bindings": out})
}

func mustJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// ref is a {"$ref": pointer} step input value.
func ref(ptr string) map[string]any { return map[string]any{"$ref": ptr} }

// call is one line the test handler appended to its calls file.
type call struct {
	EffectID      string          `json:"effect_id"`
	Fingerprint   string          `json:"fingerprint"`
	EffectAttempt int             `json:"effect_attempt"`
	Attempt       int             `json:"attempt"`
	CallID        string          `json:"call_id"`
	Input         json.RawMessage `json:"input"`
}

// calls reads the calls file at path; a file not yet written holds none.
func calls(tb testing.TB, path string) []call {
	tb.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var c call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			tb.Fatalf("calls file %s: %v", path, err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// remoteCalls is how many calls of toolW reached its remote side: the
// stub's own count, or the lines of the handler's calls file.
func (w *world) remoteCalls(r runner, callsFile string) int {
	w.tb.Helper()
	if r.stub {
		return w.stubs.Stub(toolW).Calls()
	}
	return len(calls(w.tb, callsFile))
}

// fingerprint is the fingerprint the dispatcher computes for a call of
// tool with the literal input in.
func fingerprint(tb testing.TB, tool string, in any) string {
	tb.Helper()
	fp, err := handler.Fingerprint(tool, touba.OperationInvoke, json.RawMessage(mustJSON(tb, in)))
	if err != nil {
		tb.Fatal(err)
	}
	return fp
}

// seed journals an effect of step stepID of entry qid through the
// journal's own API, as an earlier process would have: prepared, then
// optionally dispatched, then optionally an outcome ("" leaves it where
// it is). It returns Finish's error, which some outcomes expect.
func (w *world) seed(qid, stepID, fp, retryMode string, dispatched bool, outcome string, result json.RawMessage) error {
	w.tb.Helper()
	ctx := context.Background()
	callID := "seed-" + stepID
	if _, err := w.j.Prepare(ctx, touba.EffectPrepare{Scope: qid, EffectID: qid + ":" + stepID, ToolRef: toolW,
		Operation: touba.OperationInvoke, Fingerprint: fp, RetryMode: retryMode, CallID: callID}); err != nil {
		w.tb.Fatal(err)
	}
	if dispatched {
		if err := w.j.Dispatch(ctx, qid, qid+":"+stepID, callID); err != nil {
			w.tb.Fatal(err)
		}
	}
	if outcome == "" {
		return nil
	}
	return w.j.Finish(ctx, touba.EffectOutcome{Scope: qid, EffectID: qid + ":" + stepID, CallID: callID, State: outcome,
		Result: result})
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(tb testing.TB, a, b []byte) bool {
	tb.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		tb.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		tb.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// field returns the value at key of the JSON object doc, encoded.
func field(tb testing.TB, doc []byte, key string) json.RawMessage {
	tb.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		tb.Fatalf("%s: %v", doc, err)
	}
	return m[key]
}

// wantEntry checks an entry's status, code and attempts.
func wantEntry(tb testing.TB, e *touba.Delivery, status, code string, attempts int) {
	tb.Helper()
	if e.Status != status || e.ErrorCode != code || e.Attempts != attempts {
		tb.Fatalf("entry %s: status %s, code %q, attempts %d; want %s, %q, %d",
			e.QueueID, e.Status, e.ErrorCode, e.Attempts, status, code, attempts)
	}
}
