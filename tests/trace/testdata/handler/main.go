// Command handler is the process handler of the trace tests: it appends the
// request's context.traceparent to the file named by its argument (one line
// per call, "" when absent) and answers ok, so a test can see the trace the
// daemon handed it.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	var req struct {
		Context struct {
			TraceParent string `json:"traceparent"`
		} `json:"context"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Println(`{"ok": false, "error": {"code": "HandlerProtocolError", "message": "bad request"}}`)
		return
	}
	f, err := os.OpenFile(os.Args[1], os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err == nil {
		_, err = fmt.Fprintf(f, "%q\n", req.Context.TraceParent)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Printf(`{"ok": false, "error": {"code": "HandlerFailed", "message": %q}}`+"\n", err.Error())
		return
	}
	fmt.Println(`{"ok": true, "output": {"seen": true}}`)
}
