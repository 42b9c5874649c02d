package expr_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/expr"
)

var bounds = expr.Bounds{Body: 1 << 20, Output: 1 << 20, Gathered: 10_000}

func mustEnv(tb testing.TB, limit uint64) *expr.Env {
	tb.Helper()
	e, err := expr.NewEnv(limit)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

func decode(tb testing.TB, s string) any {
	tb.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		tb.Fatal(err)
	}
	return v
}

func vars(tb testing.TB, body string) *expr.Vars {
	return &expr.Vars{TriggerRef: "trigger:t", EventID: "e1", ReceivedAt: "2026-01-02T03:04:04.000Z",
		Headers: map[string]string{"x-kind": "a"}, Body: decode(tb, body)}
}

func TestValues(t *testing.T) {
	env := mustEnv(t, 0)
	bounds := expr.Bounds{Body: 64 << 10, Output: 64 << 10, Gathered: 100}
	body := `{"amount": 1234, "rate": 1.5, "whole": 2.0, "big": 18446744073709551615, "type": "invoice.paid",
		"items": [{"qty": 1}, {"qty": 3}], "at": "2026-01-02T03:04:05Z", "blob": "aGk=",
		"e3": 1e3, "half": 0.5, "huge": 17e999999999}`
	for _, tc := range []struct{ src, want string }{
		{"body.amount / 100", "12"},
		{"double(body.amount) / 100.0", "12.34"},
		{"body.rate * 2.0", "3"},
		{"body.whole + 1", "3"},
		{"body.big", "18446744073709551615"},
		{"type(body.e3) == int && type(body.half) == double && body.huge > 1.0e300", "true"},
		{"body.amount > 1000.5", "true"},
		{"{'invoice': body.type, 'n': size(body.items)}", `{"invoice":"invoice.paid","n":2}`},
		{"body.items.map(i, i.qty)", "[1,3]"},
		{"lists.range(4).slice(1, 3)", "[1,2]"},
		{"lists.range(3)", "[0,1,2]"},
		{"body.type.upperAscii()", `"INVOICE.PAID"`},
		{"math.greatest(1, 7, 3)", "7"},
		{"base64.decode(body.blob)", `"aGk="`},
		{"string(base64.decode(body.blob))", `"hi"`},
		{"timestamp(body.at) + duration('1h')", `"2026-01-02T04:04:05Z"`},
		{"timestamp(body.at) - timestamp(event.received_at)", `"1s"`},
		{"headers['x-kind'] + event.trigger_ref", `"atrigger:t"`},
		{"has(body.missing) ? body.missing : null", "null"},
		{"has(event.queue_id)", "false"},
	} {
		x, err := env.Compile(tc.src, expr.Intake, expr.Value, bounds)
		if err != nil {
			t.Errorf("%s: compile: %v", tc.src, err)
			continue
		}
		got, err := x.JSON(vars(t, body))
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("%s = %s, want %s", tc.src, got, tc.want)
		}
	}
}

func TestStepScope(t *testing.T) {
	env := mustEnv(t, 0)
	if _, err := env.Compile("steps.read.output.id", expr.Intake, expr.Value, bounds); err == nil ||
		!strings.Contains(err.Error(), "undeclared reference to 'steps'") {
		t.Fatalf("steps at intake: %v", err)
	}
	x, err := env.Compile("steps.read.output.id + size(events)", expr.Step, expr.Value, bounds)
	if err != nil {
		t.Fatal(err)
	}
	v := vars(t, `{}`)
	v.Steps = map[string]any{"read": map[string]any{"output": decode(t, `{"id": 40}`)}}
	v.Events = []any{v.EventMap(), v.EventMap()}
	got, err := x.JSON(v)
	if err != nil || string(got) != "42" {
		t.Fatalf("got %s, %v", got, err)
	}
}

func TestRefusedAtCompile(t *testing.T) {
	env := mustEnv(t, 0)
	for _, tc := range []struct{ src, want string }{
		{"now()", "undeclared reference to 'now'"},
		{"body.x ==", "Syntax error"},
		{"1 + 'a'", "no matching overload"},
		{"env('HOME')", "undeclared reference to 'env'"},
		{"rand()", "undeclared reference"},
		{"1 + 2", "must be a bool"},
		{"lists.range(100000000).all(i, i > 0)", "over the limit"},
		{"body.items.all(i, body.items.all(j, i == j))", "over the limit"},
	} {
		_, err := env.Compile(tc.src, expr.Intake, expr.Bool, bounds)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err=%v, want %q", tc.src, err, tc.want)
		}
	}
	// A filter over a small body's list is within the limit.
	if _, err := env.Compile("body.items.exists(i, i.qty > 2)", expr.Intake, expr.Bool,
		expr.Bounds{Body: 64 << 10}); err != nil {
		t.Fatal(err)
	}
}

func TestRuntimeErrors(t *testing.T) {
	env := mustEnv(t, 0)
	for _, src := range []string{"body.missing == 1", "body.type", "1 / (size(body.items) - 2) == 0", "body.amount / 0 == 0"} {
		x, err := env.Compile(src, expr.Intake, expr.Bool, bounds)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		_, err = x.Bool(vars(t, `{"type": "a", "items": [1, 2], "amount": 3}`))
		if !errors.Is(err, expr.ErrFailed) {
			t.Errorf("%s: err=%v, want ErrFailed", src, err)
		}
	}
	x, err := env.Compile("{1: 2}", expr.Intake, expr.Value, bounds)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.JSON(vars(t, `{}`)); !errors.Is(err, expr.ErrFailed) {
		t.Fatalf("int key: %v", err)
	}
}

func TestRuntimeCostLimit(t *testing.T) {
	// The static estimate bounds a list by max_body_bytes; a limit under
	// what the body holds stops the evaluation.
	env := mustEnv(t, 100)
	x, err := env.Compile("body.items.all(i, i > 0)", expr.Intake, expr.Bool, expr.Bounds{Body: 10})
	if err != nil {
		t.Fatal(err)
	}
	items := strings.Repeat("1,", 200) + "1"
	_, err = x.Bool(vars(t, `{"items": [`+items+`]}`))
	if !errors.Is(err, expr.ErrFailed) || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("err=%v, want a cost limit failure", err)
	}
}

func TestNotJSONBody(t *testing.T) {
	env := mustEnv(t, 0)
	x, err := env.Compile("type(body) == string && body.startsWith('a=')", expr.Intake, expr.Bool, bounds)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := x.Bool(&expr.Vars{Body: "a=1&b=2"})
	if err != nil || !ok {
		t.Fatalf("got %v, %v", ok, err)
	}
}

// TestNoClockNoRandomness lists the functions of the environment: none
// reads the clock, randomness, the environment or the network, so an
// expression's value depends on its variables only.
func TestNoClockNoRandomness(t *testing.T) {
	env := mustEnv(t, 0)
	fns := env.Functions()
	if len(fns) < 50 {
		t.Fatalf("only %d functions: %v", len(fns), fns)
	}
	for _, f := range fns {
		low := strings.ToLower(f)
		for _, bad := range []string{"now", "rand", "uuid", "env", "time.", "clock", "http", "dns", "net", "file", "read"} {
			if strings.Contains(low, bad) {
				t.Errorf("function %q: looks like it reads outside the event", f)
			}
		}
	}
	// The timestamp and duration conversions are on values only.
	for _, want := range []string{"timestamp", "duration", "base64.decode", "math.@max", "lists.range", "upperAscii"} {
		if !slices.Contains(fns, want) {
			t.Errorf("no %s among %v", want, fns)
		}
	}
	// The same expression on the same event gives the same value.
	x, err := env.Compile("{'a': body.a, 'b': [1, 2.5, 'c'], 't': timestamp(body.t) + duration('90m')}", expr.Intake, expr.Value, bounds)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for i := 0; i < 20; i++ {
		got, err := x.JSON(vars(t, `{"a": {"z": 1, "y": 2}, "t": "2026-01-01T00:00:00Z"}`))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = string(got)
		} else if string(got) != first {
			t.Fatalf("%s then %s", first, got)
		}
	}
}
