package trigger

import (
	"bytes"
	"encoding/json"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/internal/jsonptr"
	"github.com/touba/touba-trigger/internal/jsonx"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// The flow-control fields of a trigger (SPEC §2.1): who may send
// (source.allow_from), how fast (source.rate_limit), which verified
// deliveries become entries (filter) and how runs of one key are ordered
// (concurrency). This file loads them strictly; source_guard.go,
// filter_match.go and conckey.go apply them.

// RateLimit is a token bucket per trigger.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// Condition is one filter condition: exactly one of Equals, In, Exists is
// set. Values are decoded with numbers kept as written (json.Number); eq
// and in are the same values compiled once at load for matching (numbers
// as decimals, filter_number.go).
type Condition struct {
	// CEL is a {"cel": EXPR} item (SPEC §2.4), a bool; the other fields
	// are unset then.
	CEL     *expr.Expr
	Pointer string
	Equals  any
	In      []any
	Exists  *bool
	isEq    bool
	eq      any
	in      []any
}

// Concurrency limits the runs of one key: at most Max at a time, in
// acceptance order when Max is 1. KeyRef is a JSON pointer into the run
// context's /event.
type Concurrency struct {
	KeyRef string
	// KeyCEL is a {"cel": EXPR} key instead of KeyRef (SPEC §2.4).
	KeyCEL *expr.Expr
	Max    int
}

// Limits of the loader.
const (
	maxRatePerSecond  = 1_000_000
	maxBurst          = 1_000_000
	maxConcurrencyMax = 10_000
)

func (w walker) allowFrom(path string, raw *strictjson.Node) ([]netip.Prefix, error) {
	list, err := w.Array(path, raw)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, w.Fail(path, "must hold at least one CIDR (omit the field to allow every address)")
	}
	out := make([]netip.Prefix, 0, len(list))
	for i, e := range list {
		s, err := w.Str(strictjson.Index(path, i), e)
		if err != nil {
			return nil, err
		}
		p, err := parseCIDR(s)
		if err != nil {
			return nil, w.Fail(strictjson.Index(path, i), "must be a CIDR such as 192.0.2.0/24 or 2001:db8::/32: %v", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// parseCIDR reads a CIDR, or a bare address as its single-address prefix.
// A prefix with host bits set (10.0.0.1/8) is refused: it is most often a
// typo for a narrower range.
func parseCIDR(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, err
	}
	if p.Masked() != p {
		return p, errHostBits
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, nil
}

type cidrError string

func (e cidrError) Error() string { return string(e) }

const errHostBits = cidrError("host bits set; write the network address")

// ParseCIDRList reads --trusted-proxies: CIDRs (or addresses) separated by
// commas; empty means none.
func ParseCIDRList(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := parseCIDR(f)
		if err != nil {
			return nil, cidrError("bad CIDR " + f + ": " + err.Error())
		}
		out = append(out, p)
	}
	return out, nil
}

func (w walker) rateLimit(path string, raw *strictjson.Node) (*RateLimit, error) {
	m, err := w.Object(path, raw, []string{"per_second", "burst"}, "per_second")
	if err != nil {
		return nil, err
	}
	rl := &RateLimit{}
	ps := m["per_second"]
	if err := w.Is(path+".per_second", ps, strictjson.Number); err != nil {
		return nil, err
	}
	f, err := strconv.ParseFloat(ps.Text, 64)
	if err != nil || math.IsNaN(f) {
		return nil, w.Fail(path+".per_second", "must be a number (got %s)", ps.Text)
	}
	if f <= 0 || f > maxRatePerSecond {
		return nil, w.Fail(path+".per_second", "must be above 0 and at most %d", maxRatePerSecond)
	}
	rl.PerSecond = f
	// Without a burst, one second's worth (at least one request).
	rl.Burst = int(math.Max(1, math.Ceil(f)))
	if b, ok := m["burst"]; ok {
		bv, err := w.Integer(path+".burst", b, maxBurst)
		if err != nil {
			return nil, err
		}
		rl.Burst = int(bv)
	}
	return rl, nil
}

func (w walker) filter(path string, raw *strictjson.Node, b expr.Bounds) ([]Condition, error) {
	list, err := w.Array(path, raw)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, w.Fail(path, "must hold at least one condition (omit the field to keep every delivery)")
	}
	out := make([]Condition, 0, len(list))
	for i, e := range list {
		p := strictjson.Index(path, i)
		m, err := w.Object(p, e, []string{"pointer", "equals", "in", "exists", "cel"})
		if err != nil {
			return nil, err
		}
		var c Condition
		if v, ok := m["cel"]; ok {
			if len(m) != 1 {
				return nil, w.Fail(p, `a "cel" condition stands alone: {"cel": EXPR}`)
			}
			if c.CEL, err = w.compile(p+".cel", v, expr.Intake, expr.Bool, b); err != nil {
				return nil, err
			}
			out = append(out, c)
			continue
		}
		if m["pointer"] == nil {
			return nil, w.Fail(p, `must have "pointer" (or be {"cel": EXPR})`)
		}
		if c.Pointer, err = w.Str(p+".pointer", m["pointer"]); err != nil {
			return nil, err
		}
		toks, err := jsonptr.Parse(c.Pointer)
		if err != nil || len(toks) == 0 || (toks[0] != "headers" && toks[0] != "body") {
			return nil, w.Fail(p+".pointer", "must be a JSON pointer into /headers or /body")
		}
		if toks[0] == "headers" && len(toks) > 1 && toks[1] != strings.ToLower(toks[1]) {
			return nil, w.Fail(p+".pointer", "header names are lower-case in the filter document")
		}
		if len(m) != 2 {
			return nil, w.Fail(p, `must have exactly one of "equals", "in", "exists"`)
		}
		switch {
		case m["equals"] != nil:
			c.isEq = true
			if c.Equals, err = decodeValue(m["equals"].Raw); err != nil {
				return nil, w.Fail(p+".equals", "must be a JSON value")
			}
			c.eq = compileValue(c.Equals)
		case m["in"] != nil:
			vals, err := w.Array(p+".in", m["in"])
			if err != nil {
				return nil, err
			}
			if len(vals) == 0 {
				return nil, w.Fail(p+".in", "must hold at least one value")
			}
			for _, r := range vals {
				v, err := decodeValue(r.Raw)
				if err != nil {
					return nil, w.Fail(p+".in", "must hold JSON values")
				}
				c.In = append(c.In, v)
				c.in = append(c.in, compileValue(v))
			}
		default:
			b, err := w.Boolean(p+".exists", m["exists"])
			if err != nil {
				return nil, err
			}
			c.Exists = &b
		}
		out = append(out, c)
	}
	return out, nil
}

func (w walker) concurrency(path string, raw *strictjson.Node, b expr.Bounds) (*Concurrency, error) {
	m, err := w.Object(path, raw, []string{"key", "max"}, "key")
	if err != nil {
		return nil, err
	}
	c := &Concurrency{Max: 1}
	if c.KeyRef, c.KeyCEL, err = w.eventKey(path+".key", m["key"], "group runs", b); err != nil {
		return nil, err
	}
	if v, ok := m["max"]; ok {
		n, err := w.Integer(path+".max", v, maxConcurrencyMax)
		if err != nil {
			return nil, err
		}
		c.Max = int(n)
	}
	return c, nil
}

// eventKey loads a key of runs ({"$ref": pointer into /event}, or
// {"cel": EXPR}): of concurrency, debounce or batch. what says what the
// key does, for the refusal of /event/queue_id, unique to each entry.
func (w walker) eventKey(path string, raw *strictjson.Node, what string, b expr.Bounds) (string, *expr.Expr, error) {
	if raw.Kind == strictjson.Object && len(raw.Keys) == 1 && raw.Keys[0] == "cel" {
		x, err := w.compile(strictjson.Child(path, "cel"), raw.Vals[0], expr.Intake, expr.Value, b)
		return "", x, err
	}
	ref, err := w.eventRef(path, raw, what)
	return ref, nil, err
}

func (w walker) eventRef(path string, raw *strictjson.Node, what string) (string, error) {
	km, err := w.Object(path, raw, []string{"$ref"}, "$ref")
	if err != nil {
		return "", err
	}
	at := strictjson.Child(path, "$ref")
	ref, err := w.Str(at, km["$ref"])
	if err != nil {
		return "", err
	}
	toks, err := jsonptr.Parse(ref)
	if err != nil || len(toks) < 2 || toks[0] != "event" {
		return "", w.Fail(at, "must be a JSON pointer into /event (for example /event/body/customer_id)")
	}
	switch toks[1] {
	case "trigger_ref", "event_id", "received_at", "headers", "body":
	case "queue_id":
		return "", w.Fail(at, "/event/queue_id is unique to each entry: it cannot %s", what)
	default:
		return "", w.Fail(at, "must point into /event/body, /event/headers, /event/event_id, /event/trigger_ref or /event/received_at")
	}
	return ref, nil
}

// decodeValue decodes one JSON value with numbers kept as written.
func decodeValue(raw []byte) (any, error) {
	if v, ok := jsonx.Decode(raw); ok {
		return v, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// flow loads a trigger's filter and concurrency fields.
func (w walker) flow(path string, m strictjson.Fields, t *Trigger) error {
	var err error
	if v, ok := m["filter"]; ok {
		if t.Filter, err = w.filter(path+".filter", v, t.bounds()); err != nil {
			return err
		}
	}
	if v, ok := m["concurrency"]; ok {
		if t.Concurrency, err = w.concurrency(path+".concurrency", v, t.bounds()); err != nil {
			return err
		}
	}
	return nil
}
