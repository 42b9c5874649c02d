// Package expr compiles and evaluates the CEL expressions of a program
// (SPEC §2.4): filter items, keys, step inputs and step conditions. It is
// pure: no I/O, no clock, no randomness. An Env is built once per load
// with the cost limit; each expression is compiled, type-checked and its
// cost estimated once, then evaluated per delivery or per step with the
// same limit at run time.
//
// Variables: every expression sees event (the run context's /event, a
// map), body (event.body: the parsed JSON, or the raw body as a string)
// and headers (lower-case names to values); step inputs and `when` also
// see steps ({"<id>": {"output": ...}}) and events (every gathered
// delivery, as event is).
//
// JSON numbers: an integral number that fits an int64 is a CEL int (a
// uint when it only fits a uint64); any other number is a double. So
// `body.amount / 100` is integer division for an integral amount; write
// `double(body.amount) / 100.0` for a fraction.
package expr

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
)

// DefaultCostLimit is --expression-cost-limit's default (SPEC §2.4).
const DefaultCostLimit = 1_000_000

// Scope says which variables an expression sees.
type Scope int

const (
	// Intake is a filter item or a key: event, body, headers.
	Intake Scope = iota
	// Step is a step's input or `when`: also steps and events.
	Step
)

// Result says what an expression must give.
type Result int

const (
	// Bool is a condition: a filter item or `when`.
	Bool Result = iota
	// Value is any JSON value: a key or an input.
	Value
)

// Variable names.
const (
	VarEvent   = "event"
	VarBody    = "body"
	VarHeaders = "headers"
	VarSteps   = "steps"
	VarEvents  = "events"
)

// Env compiles expressions under one cost limit.
type Env struct {
	limit  uint64
	intake *cel.Env
	step   *cel.Env
}

// Bounds are the largest values an expression of a trigger can meet, for
// the static cost estimate: the trigger's max_body_bytes bounds every
// field of an event, Output a step's output, Gathered the deliveries of
// /events.
type Bounds struct {
	Body     int64
	Output   int64
	Gathered int64
}

// NewEnv builds the environments with the standard library, the strings,
// math, encoders and lists extensions, and nothing that reads the clock,
// randomness, the environment or the network. limit 0 is DefaultCostLimit.
func NewEnv(limit uint64) (*Env, error) {
	if limit == 0 {
		limit = DefaultCostLimit
	}
	base := []cel.EnvOption{
		cel.CustomTypeAdapter(adapter{}),
		ext.Strings(),
		ext.Math(),
		ext.Encoders(),
		ext.Lists(),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		cel.DefaultUTCTimeZone(true),
		cel.Variable(VarEvent, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(VarBody, cel.DynType),
		cel.Variable(VarHeaders, cel.MapType(cel.StringType, cel.StringType)),
	}
	intake, err := cel.NewEnv(base...)
	if err != nil {
		return nil, fmt.Errorf("expression environment: %w", err)
	}
	step, err := intake.Extend(
		cel.Variable(VarSteps, cel.MapType(cel.StringType, cel.MapType(cel.StringType, cel.DynType))),
		cel.Variable(VarEvents, cel.ListType(cel.MapType(cel.StringType, cel.DynType))),
	)
	if err != nil {
		return nil, fmt.Errorf("expression environment: %w", err)
	}
	return &Env{limit: limit, intake: intake, step: step}, nil
}

// Limit is the cost limit of e.
func (e *Env) Limit() uint64 { return e.limit }

// Expr is one compiled expression.
type Expr struct {
	Source string
	result Result
	prog   cel.Program
	// Cost is the static estimate's upper bound.
	Cost uint64
}

// Compile parses, type-checks and estimates src. The error is CEL's
// message (or the cost estimate's), for the loader to name with the file
// and the JSON path.
func (e *Env) Compile(src string, scope Scope, want Result, b Bounds) (*Expr, error) {
	env := e.intake
	if scope == Step {
		env = e.step
	}
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty expression")
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, errors.New(oneLine(iss.Err().Error()))
	}
	if want == Bool {
		t := ast.OutputType()
		if !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
			return nil, fmt.Errorf("must be a bool, not %s", t)
		}
	}
	est, err := env.EstimateCost(ast, estimator{b: b})
	if err != nil {
		return nil, fmt.Errorf("cost estimate: %v", err)
	}
	if est.Max > e.limit {
		return nil, fmt.Errorf("estimated cost up to %d is over the limit %d (--expression-cost-limit); "+
			"the estimate takes each string or list read from the event to be up to max_body_bytes (%d) long: "+
			"lower max_body_bytes, or raise the limit",
			est.Max, e.limit, b.Body)
	}
	prog, err := env.Program(ast, cel.CostLimit(e.limit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, errors.New(oneLine(err.Error()))
	}
	return &Expr{Source: src, result: want, prog: prog, Cost: est.Max}, nil
}

// ErrFailed wraps every evaluation error (ExpressionFailed for callers).
var ErrFailed = errors.New("expression failed")

// eval runs x against vars.
func (x *Expr) eval(vars *Vars) (ref.Val, error) {
	out, _, err := x.prog.Eval(vars)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrFailed, x.Source, oneLine(err.Error()))
	}
	return out, nil
}

// Bool evaluates a condition.
func (x *Expr) Bool(vars *Vars) (bool, error) {
	out, err := x.eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("%w: %s: gave %s, not a bool", ErrFailed, x.Source, out.Type().TypeName())
	}
	return bool(b), nil
}

// JSON evaluates x and gives its value as JSON (not canonical: callers
// that fingerprint or compare it make it so).
func (x *Expr) JSON(vars *Vars) ([]byte, error) {
	out, err := x.eval(vars)
	if err != nil {
		return nil, err
	}
	b, err := marshal(out)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFailed, x.Source, err)
	}
	return b, nil
}

func oneLine(s string) string {
	s = strings.TrimPrefix(s, "ERROR: <input>:")
	return strings.Join(strings.Fields(s), " ")
}

// Functions are the names of every function an expression of a step
// (the larger scope) may call, sorted: what `check` or a test can list.
func (e *Env) Functions() []string {
	out := make([]string, 0, len(e.step.Functions()))
	for name := range e.step.Functions() {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
