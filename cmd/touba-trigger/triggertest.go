package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/report"
)

// runTriggersTest is `touba-trigger triggers test REF [--program FILE]
// [--last N] [--json]` (SPEC §2.4): trigger REF of the running program,
// or of the candidate program FILE (read here, loaded by the daemon under
// its --expression-cost-limit as a reload would), against the last N
// deliveries its source accepted. Nothing is enqueued, no tool is called;
// read-only, so with no daemon it reads the files without the lock (and
// then needs --program: no program runs).
func runTriggersTest(ctx context.Context, args []string, fs *flag.FlagSet, f *cli.Operator, stdout, stderr io.Writer) error {
	var req admin.TriggerTestRequest
	var program string
	fs.StringVar(&program, "program", "", "a candidate program file to try the trigger from, instead of the running program (before a reload)")
	fs.IntVar(&req.Last, "last", admin.DefaultTestLast, fmt.Sprintf("how many of the source's last deliveries to try it on (at most %d)", admin.MaxTestLast))
	fs.Uint64Var(&f.ExpressionCostLimit, "expression-cost-limit", expr.DefaultCostLimit, "without a daemon: serve's --expression-cost-limit, to load the candidate program")
	pos, err := f.ParseExcept(fs, args, "program")
	if err != nil {
		return err
	} else if len(pos) != 1 {
		return cli.Usagef("triggers test takes one trigger REF (trigger:NAME or NAME)")
	}
	req.TriggerRef = pos[0]
	if program != "" {
		if req.Program, err = os.ReadFile(program); err != nil {
			return cli.Usagef("--program: %v", err)
		}
		req.ProgramPath = program
	}
	return f.ReadSession(ctx, stderr, func(ctx context.Context, api admin.API) error {
		r, err := api.TestTrigger(ctx, req)
		return report.Answer(stdout, f.JSON, r, err, report.TriggerTest)
	})
}
