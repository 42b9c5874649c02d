package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// runEffects is `touba-trigger effects ls|resolve|compensate` (SPEC §6):
// the effect journal as an operator reconciles it.
func runEffects(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, args, fs, f, err := operatorVerb("effects", args, stderr, false, "ls", "resolve", "compensate")
	if err != nil {
		return err
	}
	switch verb {
	case "ls":
		var flt admin.EffectFilter
		fs.StringVar(&flt.State, "state", "", "prepared, dispatched, applied, not_applied or unknown")
		fs.StringVar(&flt.Scope, "scope", "", "only the effects of this queue entry")
		fs.IntVar(&flt.Limit, "limit", 100, "most effects listed, oldest first")
		if pos, err := parseCLI(fs, args, true); err != nil {
			return err
		} else if len(pos) > 0 {
			return usageError{err: fmt.Errorf("effects ls takes no arguments, got %q", pos)}
		}
		return withReadSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
			list, err := api.Effects(ctx, flt)
			if err != nil || f.json {
				return orJSON(stdout, list, err)
			}
			t := newTable(stdout, "SCOPE", "EFFECT_ID", "TOOL", "OPERATION", "STATE", "RETRY_MODE", "ATTEMPTS", "RECEIPT", "ERROR", "UPDATED")
			for _, e := range list {
				t.row(e.Scope, e.EffectID, e.ToolRef, e.Operation, e.State, e.RetryMode, strconv.Itoa(e.Attempts), e.ReceiptRef,
					codeAndMessage(e.ErrorCode, e.ReceiptErrorCode), ts(e.UpdatedAt))
			}
			return t.flush()
		})
	case "resolve":
		return runResolve(ctx, fs, f, args, stdout, stderr)
	}
	fs.StringVar(&f.program, "program", "", "without a daemon: the program, to call the binding")
	fs.StringVar(&f.manifest, "manifest", "", "without a daemon: the manifest, to call the binding")
	fs.StringVar(&f.egressDeny, "egress-deny", "", "without a daemon: serve's --egress-deny, for a webhook binding")
	fs.BoolVar(&f.allowUnisolated, "allow-unisolated-handlers", false, "without a daemon, where this host cannot run a process handler without network: run the binding with the host's network (warned) instead of refusing, as serve's flag")
	var reason string
	fs.StringVar(&reason, "reason", "", "why, for the audit trail")
	pos, err := parseCLI(fs, args, true)
	if err != nil {
		return err
	} else if len(pos) != 2 {
		return usageError{err: errors.New("effects compensate takes SCOPE EFFECT_ID")}
	}
	return withSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
		c, err := api.Compensate(ctx, admin.CompensateRequest{Scope: pos[0], EffectID: pos[1], Reason: reason})
		if err != nil || f.json {
			if err == nil && c.State != touba.EffectApplied {
				printJSON(stdout, c)
				return compensationRefusal(c.CompensationID, c.State, c.ErrorCode)
			}
			return orJSON(stdout, c, err)
		}
		return printCompensation(stdout, c)
	})
}

// printCompensation shows an operator's compensation. Everything in it
// came from a handler or an operator's argument: escaped, as every cell of
// a table is, so a control character in a receipt or an error message
// cannot act on the terminal.
func printCompensation(stdout io.Writer, c *touba.Compensation) error {
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

// runResolve is `effects resolve SCOPE EFFECT_ID --applied --receipt-ref
// REF [--result FILE] | --not-applied`.
func runResolve(ctx context.Context, fs *flag.FlagSet, f *cliFlags, args []string, stdout, stderr io.Writer) error {
	var applied, notApplied bool
	var receipt, resultFile, reason string
	fs.StringVar(&reason, "reason", "", "why, for the audit trail (and the journal's event)")
	fs.BoolVar(&applied, "applied", false, "the effect happened: record the operator's receipt")
	fs.BoolVar(&notApplied, "not-applied", false, "the effect did not happen: the next attempt calls the handler again with the same effect id")
	fs.StringVar(&receipt, "receipt-ref", "", "with --applied: the remote side's reference of the write")
	fs.StringVar(&resultFile, "result", "", `with --applied: a JSON file, the step's output later $refs see (default {"receipt_ref": REF})`)
	pos, err := parseCLI(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageError{err: errors.New("effects resolve takes SCOPE EFFECT_ID")}
	}
	req := admin.ResolveRequest{Scope: pos[0], EffectID: pos[1], ReceiptRef: receipt, Reason: reason}
	switch {
	case applied == notApplied:
		return usageError{err: errors.New("give exactly one of --applied and --not-applied")}
	case applied && receipt == "":
		return usageError{err: errors.New("--applied needs --receipt-ref")}
	case notApplied && (receipt != "" || resultFile != ""):
		return usageError{err: errors.New("--not-applied takes no --receipt-ref or --result")}
	case applied:
		req.State = touba.EffectApplied
	default:
		req.State = touba.EffectNotApplied
	}
	if resultFile != "" {
		b, err := os.ReadFile(resultFile)
		if err != nil {
			return usageError{err: fmt.Errorf("--result: %w", err)}
		}
		if !json.Valid(b) {
			return usageError{err: fmt.Errorf("--result %s is not valid JSON", resultFile)}
		}
		req.Result = b
	}
	return withSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
		res, err := api.Resolve(ctx, req)
		if err != nil || f.json {
			return orJSON(stdout, res, err)
		}
		fmt.Fprintf(stdout, "effect %s %s: %s", cell(res.Effect.Scope, 200), cell(res.Effect.EffectID, 200), res.Effect.State)
		if res.Effect.ReceiptRef != "" {
			fmt.Fprintf(stdout, " (receipt %s)", cell(res.Effect.ReceiptRef, 400))
		}
		fmt.Fprintln(stdout)
		if len(res.Effect.Result) > 0 {
			fmt.Fprintf(stdout, "stored result: %s\n", cell(string(res.Effect.Result), 400))
		}
		fmt.Fprintln(stdout, res.Note)
		return nil
	})
}
