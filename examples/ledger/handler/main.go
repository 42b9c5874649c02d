// Command handler is the Go handler of the ledger example: it books each
// invoice into a local ledger file, one JSON line per booking, and
// deduplicates by the effect id exactly as a remote service honouring an
// Idempotency-Key would, so a retry after an unknown outcome books nothing
// twice. The same binary serves one-shot and persistent mode (the SDK
// reads TOUBA_HANDLER_MODE), and, with LEDGER_HTTP_ADDR set, serves the
// same tool over HTTP as the target of a webhook binding (README, "Over
// HTTP"): the one line that differs is the last line of main.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/touba/touba-trigger/sdk/handler"
)

type booking struct {
	EffectID string          `json:"effect_id"`
	Invoice  json.RawMessage `json:"invoice"`
}

// mu orders bookings within one process; flock orders processes.
var mu sync.Mutex

// tool is the ledger's one tool, whichever way it is served.
var tool = handler.Tool{Ref: "tool:examples.ledger/Book", Run: book}

func main() {
	if addr := os.Getenv("LEDGER_HTTP_ADDR"); addr != "" {
		// Behind a webhook binding: the signature is checked with the secret
		// in TOUBA_WEBHOOK_SECRET before book runs.
		log.Fatal(http.ListenAndServe(addr, handler.HTTPHandler(tool)))
	}
	// As a process handler (stdin/stdout), one-shot or persistent.
	handler.Main(tool)
}

func book(ctx context.Context, c *handler.Call) (*handler.Result, error) {
	var in struct {
		Invoice json.RawMessage `json:"invoice"`
	}
	if err := c.Decode(&in); err != nil || len(in.Invoice) == 0 {
		return nil, handler.Errorf("BadInput", "input must hold an invoice")
	}
	eff := c.Effect()
	if eff == nil {
		return nil, handler.Errorf("EffectContextRequired", "Book is an external write")
	}
	path := os.Getenv("LEDGER_FILE")
	if path == "" {
		path = filepath.Join(".touba", "ledger.jsonl")
	}
	line, err := record(path, booking{EffectID: eff.EffectID, Invoice: in.Invoice})
	if err != nil {
		// Nothing written for sure? We cannot tell after a failed append.
		return nil, handler.Errorf("LedgerUnavailable", "%v", err).WithReceipt(c.Receipt(handler.Unknown, ""))
	}
	return handler.Output(map[string]any{"ledger_line": line}).
		WithReceipt(c.Receipt(handler.Applied, "ledger:"+eff.EffectID)), nil
}

// record appends b unless its effect id is booked already, and returns the
// line number of the booking either way.
func record(path string, b booking) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		var old booking
		if json.Unmarshal(sc.Bytes(), &old) == nil && old.EffectID == b.EffectID {
			return n, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	line, err := json.Marshal(b)
	if err != nil {
		return 0, err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return 0, err
	}
	return n + 1, f.Sync()
}
