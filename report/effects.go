package report

import (
	"fmt"
	"io"
	"strconv"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// Effects is the table of `effects ls`: the effect journal.
func Effects(w io.Writer, list []touba.Effect) error {
	t := newTable(w, "SCOPE", "EFFECT_ID", "TOOL", "OPERATION", "STATE", "RETRY_MODE", "ATTEMPTS", "RECEIPT", "ERROR", "UPDATED")
	for _, e := range list {
		t.row(e.Scope, e.EffectID, e.ToolRef, e.Operation, e.State, e.RetryMode, strconv.Itoa(e.Attempts), e.ReceiptRef,
			codeAndMessage(e.ErrorCode, e.ReceiptErrorCode), ts(e.UpdatedAt))
	}
	return t.flush()
}

// Resolved says what `effects resolve` recorded.
func Resolved(w io.Writer, res *admin.ResolveResult) error {
	fmt.Fprintf(w, "effect %s %s: %s", cell(res.Effect.Scope, 200), cell(res.Effect.EffectID, 200), res.Effect.State)
	if res.Effect.ReceiptRef != "" {
		fmt.Fprintf(w, " (receipt %s)", cell(res.Effect.ReceiptRef, 400))
	}
	fmt.Fprintln(w)
	if len(res.Effect.Result) > 0 {
		fmt.Fprintf(w, "stored result: %s\n", cell(string(res.Effect.Result), 400))
	}
	fmt.Fprintln(w, res.Note)
	return nil
}

// CompensationJSON is `effects compensate --json`: the compensation as
// JSON, and, when it did not end applied, the same refusal as Compensation.
func CompensationJSON(w io.Writer, c *touba.Compensation) error {
	err := JSON(w, c)
	if c.State != touba.EffectApplied {
		return compensationRefusal(c.CompensationID, c.State, c.ErrorCode)
	}
	return err
}

// Compensation shows an operator's compensation. Everything in it
// came from a handler or an operator's argument: escaped, as every cell of
// a table is, so a control character in a receipt or an error message
// cannot act on the terminal.
func Compensation(stdout io.Writer, c *touba.Compensation) error {
	compID := cell(c.CompensationID, 200)
	fmt.Fprintf(stdout, "compensation %s: %s (attempt %d)\n", compID, cell(c.State, 40), c.Attempt)
	if c.Already {
		fmt.Fprintln(stdout, "it had been applied before: its journaled result is shown and no handler was called")
	}
	if c.ReceiptRef != "" {
		fmt.Fprintf(stdout, "receipt   %s\n", cell(c.ReceiptRef, 400))
	}
	if len(c.Output) > 0 {
		fmt.Fprintf(stdout, "output    %s\n", cell(string(c.Output), 400))
	}
	if c.ErrorCode != "" {
		fmt.Fprintf(stdout, "error     %s\n", cell(codeAndMessage(c.ErrorCode, c.Message), 400))
	}
	fmt.Fprintf(stdout, "the original %s stays applied\n", cell(c.EffectID, 200))
	if c.State != touba.EffectApplied {
		if c.State == touba.EffectUnknown {
			fmt.Fprintf(stdout, "find out whether it happened, then: touba-trigger effects resolve %s %s --applied --receipt-ref REF | --not-applied\n",
				cell(c.Scope, 200), compID)
		}
		return compensationRefusal(c.CompensationID, c.State, c.ErrorCode)
	}
	return nil
}

// compensationRefusal is the error of a compensation that did not end
// applied, under its own code: the handler's, or EffectOutcomeUnknown. The
// printer escapes its message like every other refusal.
func compensationRefusal(id, state, code string) error {
	if code == "" {
		code = touba.EEffectOutcomeUnknown
		if state != touba.EffectUnknown {
			code = touba.EHandlerFailed
		}
	}
	return touba.Errorf(cell(code, 80), "compensation %s is %s", cell(id, 200), cell(state, 40))
}
