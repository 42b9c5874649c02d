package trigger

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// The CEL expressions of a program (SPEC §2.4): a filter item
// {"cel": EXPR}, a key {"cel": EXPR} (concurrency, debounce, batch,
// wait_for.match, cancel_on.match), a step input's {"$cel": EXPR} and a
// step's "when". Each is compiled, type-checked and its cost estimated
// once at load (package expr); a refusal is ProgramInvalid naming the
// file, the JSON path and CEL's message.

// LoadOptions are the load's settings from the command line.
type LoadOptions struct {
	// ExpressionCostLimit is --expression-cost-limit: the static estimate
	// of every expression must fit it, and an evaluation stops past it.
	// 0 is expr.DefaultCostLimit.
	ExpressionCostLimit uint64
}

// LoadProgramWith is LoadProgram with o.
func LoadProgramWith(path string, o LoadOptions) (*Program, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load program: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("load program: %w", err)
	}
	return ParseProgramWith(path, data, o)
}

// ParseProgramWith is ParseProgram with o.
func ParseProgramWith(path string, data []byte, o LoadOptions) (*Program, error) {
	w := newWalker(path)
	w.exprs.limit = o.ExpressionCostLimit
	p, err := w.program(path, data)
	if err != nil {
		// Every refusal met before the load stopped: several unknown
		// fields of one object, say.
		return nil, w.Err()
	}
	p.Env = w.exprs.env
	p.Expressions = w.exprs.list
	at := make(map[string]int, len(p.Expressions))
	for i := range p.Expressions {
		x := &p.Expressions[i]
		x.Trigger, at[x.Path] = triggerOfPath(p, x.Path)
	}
	// By trigger, in the file's order, then by path.
	slices.SortStableFunc(p.Expressions, func(a, b Located) int {
		return cmp.Or(cmp.Compare(at[a.Path], at[b.Path]), strings.Compare(a.Path, b.Path))
	})
	return p, nil
}

// exprState is a load's expression environment, built when the first
// expression needs it (building one takes milliseconds: a program
// without expressions does not pay it), once per cost limit per process.
type exprState struct {
	limit uint64
	env   *expr.Env
	// list are the program's expressions in the order loaded, each with
	// its JSON path (Program.Expressions); bodies are the triggers'
	// max_body_bytes by ref, read before the load (route.go).
	list   []Located
	bodies map[string]int64
}

// Located is one expression of a program and where it stands: its JSON
// path in the file, and the trigger it belongs to.
type Located struct {
	Path    string
	Trigger string
	Expr    *expr.Expr
}

var envs sync.Map // cost limit -> *expr.Env: an Env is immutable, shared by loads

func (s *exprState) get() (*expr.Env, error) {
	if s.env != nil {
		return s.env, nil
	}
	limit := s.limit
	if limit == 0 {
		limit = expr.DefaultCostLimit
	}
	if e, ok := envs.Load(limit); ok {
		s.env = e.(*expr.Env)
		return s.env, nil
	}
	e, err := expr.NewEnv(limit)
	if err != nil {
		return nil, err
	}
	actual, _ := envs.LoadOrStore(limit, e)
	s.env = actual.(*expr.Env)
	return s.env, nil
}

// compile reads the expression at path (a string) and compiles it.
func (w walker) compile(path string, n *strictjson.Node, scope expr.Scope, want expr.Result, b expr.Bounds) (*expr.Expr, error) {
	src, err := w.Str(path, n)
	if err != nil {
		return nil, err
	}
	env, err := w.exprs.get()
	if err != nil {
		return nil, err
	}
	x, err := env.Compile(src, scope, want, b)
	if err != nil {
		return nil, w.FailCode(touba.EProgramInvalid, path, "CEL: %v", err)
	}
	w.exprs.list = append(w.exprs.list, Located{Path: path, Expr: x})
	return x, nil
}

// bounds are what t's expressions can meet, for their static cost.
func (t *Trigger) bounds() expr.Bounds {
	body := t.Source.MaxBodyBytes
	if body <= 0 {
		body = DefaultMaxBodyBytes
	}
	return expr.Bounds{Body: body, Output: handler.DefaultMaxPayload, Gathered: touba.MaxGathered}
}

// intakeVars are the variables of an intake expression (a filter item or a key)
// for d; body is d's body decoded, or nil to decode it here.
func intakeVars(d *touba.Delivery, b *lazyBody) *expr.Vars {
	v := &expr.Vars{TriggerRef: d.TriggerRef, EventID: d.EventID, QueueID: d.QueueID, Headers: d.Headers}
	if !d.ReceivedAt.IsZero() {
		v.ReceivedAt = touba.FormatTime(d.ReceivedAt)
	}
	if b == nil {
		b = &lazyBody{raw: d.Body}
	}
	if doc, ok := b.get(); ok {
		v.Body = doc
	} else {
		v.Body = string(d.Body)
	}
	return v
}

// exprKey is the value of a key expression: the canonical JSON of what it
// gives, "" for null (not limited, not gathered, no cancel key, as a
// $ref resolving to nothing). An evaluation error is ExpressionFailed.
func exprKey(x *expr.Expr, v *expr.Vars) (string, error) {
	b, err := x.JSON(v)
	if err != nil {
		return "", touba.Errorf(touba.EExpressionFailed, "%v", err)
	}
	s, _ := CanonicalValue(json.RawMessage(b))
	return s, nil
}

// keyName names a key in messages: its pointer or its expression.
func keyName(ref string, x *expr.Expr) string {
	if x != nil {
		return "cel " + x.Source
	}
	return ref
}

// isCEL reports whether n is {key: ...} alone: {"cel": EXPR} or
// {"$cel": EXPR}.
func isCEL(n *strictjson.Node, key string) bool {
	return n.Kind == strictjson.Object && len(n.Keys) == 1 && n.Keys[0] == key
}

// triggerOfPath is the ref and index of the trigger a JSON path of the
// program stands in ("$.triggers[3]..."); "" and -1 when it names none.
func triggerOfPath(p *Program, path string) (string, int) {
	rest, ok := strings.CutPrefix(path, "$.triggers[")
	if !ok {
		return "", -1
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return "", -1
	}
	i, err := strconv.Atoi(rest[:end])
	if err != nil || i < 0 || i >= len(p.Triggers) {
		return "", -1
	}
	return p.Triggers[i].Ref, i
}
