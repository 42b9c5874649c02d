// Command remote is the process handler of the crash tests: an external
// write whose "remote side" is an append-only file. Every request that
// reaches Run is one line of that file, so a test can count, after any
// crash, how often each effect reached the remote.
//
// With retry_mode idempotency_key the remote behaves like a service that
// honours an Idempotency-Key: a second request with the same effect_id is
// no new write, and it is answered applied with the first write's receipt.
// With the other modes every request is a new write, as at a remote that
// does not deduplicate. The answer is always applied with a valid receipt.
//
// Usage: remote LOGFILE. While the file LOGFILE.hold exists, a call holds
// its answer after recording its write (for tests that kill the daemon
// while a handler is mid-call).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/touba/touba-trigger/sdk/handler"
)

// Ref is the tool this handler implements.
const Ref = "tool:crash/Write"

// Line is one request as the remote recorded it.
type Line struct {
	EffectID  string          `json:"effect_id"`
	CallID    string          `json:"call_id"`
	Attempt   int             `json:"attempt"`
	RetryMode string          `json:"retry_mode"`
	Kind      string          `json:"kind"` // "write", or "duplicate" for a deduplicated request
	Receipt   string          `json:"receipt"`
	Input     json.RawMessage `json:"input"`
}

// maxHold bounds a held call, so an orphaned handler never outlives a test
// run by much.
const maxHold = time.Minute

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: remote LOGFILE")
		os.Exit(2)
	}
	path := os.Args[1]
	handler.Main(handler.Tool{Ref: Ref, Run: func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
		eff := c.Effect()
		if eff == nil {
			return nil, handler.Errorf("EffectContextRequired", "%s is an external write", Ref)
		}
		line, err := record(path, Line{EffectID: eff.EffectID, CallID: c.Context.CallID, Attempt: eff.Attempt,
			RetryMode: eff.RetryMode, Input: c.Input})
		if err != nil {
			// The write may or may not be in the file: say so.
			return nil, handler.Errorf("RemoteUnavailable", "%v", err).WithReceipt(c.Receipt(handler.Unknown, ""))
		}
		hold(path + ".hold")
		out := map[string]any{"receipt": line.Receipt, "effect_id": line.EffectID, "kind": line.Kind}
		return handler.Output(out).WithReceipt(c.Receipt(handler.Applied, line.Receipt)), nil
	}})
}

// record appends one request to the remote file under an exclusive flock,
// deduplicating by effect_id for idempotency_key: calls of several handler
// processes run at once, and the check and the append must be one step.
func record(path string, l Line) (Line, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return l, fmt.Errorf("open remote: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return l, fmt.Errorf("lock remote: %w", err)
	}
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<40))
	if err != nil {
		return l, fmt.Errorf("read remote: %w", err)
	}
	writes := 0
	l.Kind = "write"
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var prev Line
		if err := json.Unmarshal(sc.Bytes(), &prev); err != nil {
			return l, fmt.Errorf("remote file: %w", err)
		}
		if prev.EffectID != l.EffectID || prev.Kind != "write" {
			continue
		}
		writes++
		if l.RetryMode == "idempotency_key" {
			l.Kind, l.Receipt = "duplicate", prev.Receipt
		}
	}
	if l.Kind == "write" {
		l.Receipt = fmt.Sprintf("w%d:%s", writes+1, l.EffectID)
	}
	b, err := json.Marshal(l)
	if err != nil {
		return l, err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return l, fmt.Errorf("append remote: %w", err)
	}
	return l, nil
}

// hold waits while the file at path exists, at most maxHold.
func hold(path string) {
	deadline := time.Now().Add(maxHold)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err != nil {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling a file the test removes; nothing to wait on
	}
}
