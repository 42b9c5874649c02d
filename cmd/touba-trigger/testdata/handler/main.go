// Command handler is a touba-tool-handler-v1 process handler for the CLI's
// end-to-end tests. It appends one JSON line per call to the file named by
// its first argument, so a test can count calls across daemon restarts.
//
// Modes (second argument):
//
//	ok               answer ok, output {"tool", "operation", "input"}, applied receipt
//	die-once MARKER  the first call (MARKER absent) creates MARKER and exits
//	                 without answering, as a crash after the request was
//	                 read (outcome unknown); later calls answer as ok
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

type request struct {
	Operation string          `json:"operation"`
	ToolRef   string          `json:"tool_ref"`
	Input     json.RawMessage `json:"input"`
	Context   struct {
		CallID string `json:"call_id"`
		Effect *struct {
			EffectID    string `json:"effect_id"`
			Fingerprint string `json:"fingerprint"`
			Attempt     int    `json:"attempt"`
		} `json:"effect"`
	} `json:"context"`
}

func main() {
	if len(os.Args) < 3 {
		fatal("usage: handler LOGFILE MODE [ARG]")
	}
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fatal("read request: " + err.Error())
	}
	line := map[string]any{"operation": req.Operation, "tool_ref": req.ToolRef, "input": req.Input}
	if e := req.Context.Effect; e != nil {
		line["effect_id"], line["attempt"] = e.EffectID, e.Attempt
	}
	b, _ := json.Marshal(line)
	f, err := os.OpenFile(os.Args[1], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fatal(err.Error())
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		fatal(err.Error())
	}
	f.Close()

	if os.Args[2] == "die-once" {
		if _, err := os.Stat(os.Args[3]); os.IsNotExist(err) {
			os.WriteFile(os.Args[3], []byte("died"), 0o600)
			os.Exit(3)
		}
	}
	out, _ := json.Marshal(map[string]any{"tool": req.ToolRef, "operation": req.Operation, "input": req.Input})
	resp := map[string]any{"ok": true, "output": json.RawMessage(out)}
	if e := req.Context.Effect; e != nil {
		resp["effect_receipt"] = map[string]string{"effect_id": e.EffectID, "fingerprint": e.Fingerprint,
			"outcome": "applied", "receipt_ref": "ref-" + e.EffectID}
	}
	json.NewEncoder(os.Stdout).Encode(resp)
}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "handler:", msg)
	os.Exit(2)
}
