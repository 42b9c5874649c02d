package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/report"
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
		if pos, err := f.Parse(fs, args); err != nil {
			return err
		} else if len(pos) > 0 {
			return cli.Usagef("effects ls takes no arguments, got %q", pos)
		}
		return f.ReadSession(ctx, stderr, func(ctx context.Context, api admin.API) error {
			list, err := api.Effects(ctx, flt)
			return report.Answer(stdout, f.JSON, list, err, report.Effects)
		})
	case "resolve":
		return runResolve(ctx, fs, f, args, stdout, stderr)
	}
	fs.StringVar(&f.Program, "program", "", "without a daemon: the program, to call the binding")
	fs.StringVar(&f.Manifest, "manifest", "", "without a daemon: the manifest, to call the binding")
	fs.StringVar(&f.EgressDeny, "egress-deny", "", "without a daemon: serve's --egress-deny, for a webhook binding")
	fs.Uint64Var(&f.ExpressionCostLimit, "expression-cost-limit", expr.DefaultCostLimit, "without a daemon: serve's --expression-cost-limit, to load the program")
	fs.BoolVar(&f.AllowUnisolated, "allow-unisolated-handlers", false, "without a daemon, where this host cannot run a process handler without network: run the binding with the host's network (warned) instead of refusing, as serve's flag")
	var reason string
	fs.StringVar(&reason, "reason", "", "why, for the audit trail")
	pos, err := f.Parse(fs, args)
	if err != nil {
		return err
	} else if len(pos) != 2 {
		return cli.Usagef("effects compensate takes SCOPE EFFECT_ID")
	}
	return f.Session(ctx, stderr, func(ctx context.Context, api admin.API) error {
		c, err := api.Compensate(ctx, admin.CompensateRequest{Scope: pos[0], EffectID: pos[1], Reason: reason})
		if err != nil {
			return err
		} else if f.JSON {
			return report.CompensationJSON(stdout, c)
		}
		return report.Compensation(stdout, c)
	})
}

// runResolve is `effects resolve SCOPE EFFECT_ID --applied --receipt-ref
// REF [--result FILE] | --not-applied`.
func runResolve(ctx context.Context, fs *flag.FlagSet, f *cli.Operator, args []string, stdout, stderr io.Writer) error {
	var applied, notApplied bool
	var receipt, resultFile, reason string
	fs.StringVar(&reason, "reason", "", "why, for the audit trail (and the journal's event)")
	fs.BoolVar(&applied, "applied", false, "the effect happened: record the operator's receipt")
	fs.BoolVar(&notApplied, "not-applied", false, "the effect did not happen: the next attempt calls the handler again with the same effect id")
	fs.StringVar(&receipt, "receipt-ref", "", "with --applied: the remote side's reference of the write")
	fs.StringVar(&resultFile, "result", "", `with --applied: a JSON file, the step's output later $refs see (default {"receipt_ref": REF})`)
	pos, err := f.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return cli.Usagef("effects resolve takes SCOPE EFFECT_ID")
	}
	req := admin.ResolveRequest{Scope: pos[0], EffectID: pos[1], ReceiptRef: receipt, Reason: reason}
	switch {
	case applied == notApplied:
		return cli.Usagef("give exactly one of --applied and --not-applied")
	case applied && receipt == "":
		return cli.Usagef("--applied needs --receipt-ref")
	case notApplied && (receipt != "" || resultFile != ""):
		return cli.Usagef("--not-applied takes no --receipt-ref or --result")
	case applied:
		req.State = touba.EffectApplied
	default:
		req.State = touba.EffectNotApplied
	}
	if resultFile != "" {
		b, err := os.ReadFile(resultFile)
		if err != nil {
			return cli.Usagef("--result: %w", err)
		}
		if !json.Valid(b) {
			return cli.Usagef("--result %s is not valid JSON", resultFile)
		}
		req.Result = b
	}
	return f.Session(ctx, stderr, func(ctx context.Context, api admin.API) error {
		res, err := api.Resolve(ctx, req)
		return report.Answer(stdout, f.JSON, res, err, report.Resolved)
	})
}
