package dispatcher_test

import (
	"testing"

	"github.com/touba/touba-trigger/dispatcher"
)

// With 256 workers by default, a process-per-call binding that sets no
// max_concurrency must not start 256 processes at once: it gets
// DefaultProcessConcurrency. An in-process binding stays unbounded.
func TestDefaultProcessConcurrency(t *testing.T) {
	w := newWorld(t, program(t, 1, step{ID: "a", Tool: toolW}, step{ID: "b", Tool: toolThen}),
		manifestOf(t, binding{Tool: toolW, Stub: true, Write: "idempotency_key"}, binding{Tool: toolThen}), nil, false)
	c := w.config()
	if got := c.Bindings[toolThen].MaxConcurrency; got != dispatcher.DefaultProcessConcurrency {
		t.Errorf("process-per-call binding without max_concurrency: bound %d, want %d", got, dispatcher.DefaultProcessConcurrency)
	}
	if got := c.Bindings[toolW].MaxConcurrency; got != 0 {
		t.Errorf("accounting_stub binding without max_concurrency: bound %d, want 0 (unbounded)", got)
	}
}
