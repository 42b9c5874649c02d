// Package main is the process handler the dispatcher's tests run as a
// real child process, built once by their TestMain with the Go SDK.
//
// It implements the tool named by its first argument, so one binary can
// back several bindings. Its input steers it, never its environment:
//
//	{"mode": "ok" | "not_applied" | "unknown" | "crash" | "sleep" | "block" | "fail" | "echo_secret" | "fail_secret",
//	 "calls": "/abs/file", "times": 1, "code": "...", "after": "ok", "after_code": "...",
//	 "sleep_ms": 100, "until_file": "/abs/file", "secret_env": "NAME", "data": any,
//	 "compensate_mode": "mode of a compensate call"}
//
// Every call first appends one JSON line to the calls file (effect id,
// fingerprint, attempts, input), so a test can count what reached the
// remote side. The mode then applies to the first "times" calls of the
// same effect (0: to every call); later calls follow "after" with
// "after_code" (default: ok). The modes:
//   - ok: output {"data", "input", "effect_id", "fingerprint", "effect_attempt", "call"}, applied receipt;
//   - not_applied: business error "code" with a not_applied receipt;
//   - unknown: business error "code" with an unknown receipt;
//   - fail: business error "code" without any receipt;
//   - crash: exit 3 without answering;
//   - sleep: wait sleep_ms (or until killed), then ok;
//   - block: wait until the file until_file exists (or until killed), then ok;
//   - echo_secret: output holds the value of the env var secret_env, applied receipt;
//   - echo_secret_escaped: the same, every character written as a JSON \u escape;
//   - fail_secret: business error "code" whose message holds that value, not_applied receipt;
//   - receipt_secret: ok, with that value in the applied receipt's ref.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/touba/touba-trigger/sdk/handler"
)

type input struct {
	Mode      string `json:"mode"`
	Calls     string `json:"calls"`
	Times     int    `json:"times"`
	Code      string `json:"code"`
	After     string `json:"after"`
	AfterCode string `json:"after_code"`
	SleepMS   int    `json:"sleep_ms"`
	UntilFile string `json:"until_file"`
	SecretEnv string `json:"secret_env"`
	// CompensateMode, when set, is the mode of a compensate call.
	CompensateMode string `json:"compensate_mode"`
}

// line is one record of the calls file.
type line struct {
	EffectID      string          `json:"effect_id"`
	Fingerprint   string          `json:"fingerprint"`
	EffectAttempt int             `json:"effect_attempt"`
	Attempt       int             `json:"attempt"`
	CallID        string          `json:"call_id"`
	Input         json.RawMessage `json:"input"`
}

// record appends l to the calls file and returns how many calls of the
// same effect (this one included) the file holds.
func record(path string, l line) (int, error) {
	if path == "" {
		return 1, nil
	}
	b, err := json.Marshal(l)
	if err != nil {
		return 0, err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	// One write per line: appends of a few hundred bytes do not interleave.
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	f, err = os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var o line
		if json.Unmarshal(sc.Bytes(), &o) == nil && o.EffectID == l.EffectID {
			n++
		}
	}
	return n, sc.Err()
}

func run(ctx context.Context, c *handler.Call) (*handler.Result, error) {
	var in input
	if err := c.Decode(&in); err != nil {
		return nil, handler.Errorf("BadInput", "%v", err)
	}
	l := line{Attempt: c.Context.Attempt, CallID: c.Context.CallID, Input: c.Input}
	if e := c.Effect(); e != nil {
		l.EffectID, l.Fingerprint, l.EffectAttempt = e.EffectID, e.Fingerprint, e.Attempt
	}
	n, err := record(in.Calls, l)
	if err != nil {
		return nil, handler.Errorf("CallsFile", "%v", err)
	}
	mode, code := in.Mode, in.Code
	if in.Times > 0 && n > in.Times {
		mode, code = in.After, in.AfterCode
		if mode == "" {
			mode = "ok"
		}
	}
	if c.Operation == handler.Compensate && in.CompensateMode != "" {
		mode = in.CompensateMode
	}
	if code == "" {
		code = "TestFailure"
	}
	out := map[string]any{"input": c.Input, "effect_id": l.EffectID, "fingerprint": l.Fingerprint,
		"effect_attempt": l.EffectAttempt, "call": n}
	var data struct {
		Data json.RawMessage `json:"data"`
	}
	if err := c.Decode(&data); err == nil && data.Data != nil {
		out["data"] = data.Data
	}
	switch mode {
	case "ok":
	case "not_applied":
		return nil, handler.Errorf(code, "not applied, as asked").WithReceipt(c.Receipt(handler.NotApplied, ""))
	case "unknown":
		return nil, handler.Errorf(code, "outcome unknown, as asked").WithReceipt(c.Receipt(handler.Unknown, ""))
	case "fail":
		return nil, handler.Errorf(code, "failed, as asked")
	case "crash":
		os.Exit(3)
	case "sleep":
		select {
		case <-time.After(time.Duration(in.SleepMS) * time.Millisecond):
		case <-ctx.Done():
			return nil, handler.Errorf("Cancelled", "cancelled while sleeping")
		}
	case "block":
		for {
			if _, err := os.Stat(in.UntilFile); err == nil {
				break
			}
			select {
			case <-time.After(5 * time.Millisecond):
				continue
			case <-ctx.Done():
				return nil, handler.Errorf("Cancelled", "cancelled while blocked")
			}
		}
	case "echo_secret":
		out["token"] = os.Getenv(in.SecretEnv)
	case "echo_secret_escaped":
		var b strings.Builder
		for _, r := range os.Getenv(in.SecretEnv) {
			fmt.Fprintf(&b, "\\u%04x", r)
		}
		out["token"] = json.RawMessage(`"` + b.String() + `"`)
	case "receipt_secret":
	case "fail_secret":
		return nil, handler.Errorf(code, "token %s refused", os.Getenv(in.SecretEnv)).
			WithReceipt(c.Receipt(handler.NotApplied, ""))
	default:
		return nil, handler.Errorf("BadInput", "unknown mode %q", mode)
	}
	ref := fmt.Sprintf("test:%s#%d", l.EffectID, n)
	if mode == "receipt_secret" {
		ref += "/" + os.Getenv(in.SecretEnv)
	}
	return handler.Output(out).WithReceipt(c.Receipt(handler.Applied, ref)), nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: handler TOOL_REF")
		os.Exit(2)
	}
	handler.Main(handler.Tool{Ref: os.Args[1], Run: run})
}
