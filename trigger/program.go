// Package trigger holds the program model (the touba-air-v1 subset of
// SPEC §2.1, with the durable steps of §2.3) with its strict loader, and
// the HTTP intake handler that verifies each webhook, decides its
// identity and enqueues it with the values that waits and cancels match.
package trigger

import (
	"encoding/json"
	"fmt"
	//PRUNED
	"net/http"
	"net/netip"
	//PRUNED
	"regexp"
	"sort"
	//PRUNED

	//PRUNED
	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/internal/strictjson"
	"github.com/touba/touba-trigger/verify"
)

// AIRVersion is the only program format this build reads.
const AIRVersion = "touba-air-v1"

// Defaults of SPEC §2.1.
const (
	DefaultEventIDHeader   = "x-touba-event-id"
	DefaultMaxBodyBytes    = 1 << 20
	DefaultToleranceSec    = 300
	DefaultMaxAttempts     = 8
	DefaultInitialMS       = 500
	DefaultMaxIntervalMS   = 60000
	maxBodyBytesUpperBound = 64 << 20
)

var (
	refPattern    = regexp.MustCompile(`^trigger:[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)
	toolPattern   = regexp.MustCompile(`^tool:[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)
	stepIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	headerPattern = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// Program is a loaded program file.
type Program struct {
	Path string
	// Env compiled the program's expressions (SPEC §2.4), under the
	// load's cost limit; nil when the program has none.
	Env      *expr.Env
	Triggers []*Trigger
	// Expressions are every CEL expression of the program, in the order
	// of the file, with where each stands and its static cost (check
	// prints them).
	Expressions []Located
	byName      map[string]*Trigger
}

// Trigger is one webhook trigger and its steps.
type Trigger struct {
	Ref    string // "trigger:<name>"
	Name   string // the part after "trigger:", as in the URL
	Source Source
	Steps  []Step
	Retry  Retry
	// Filter, when set, must all hold for a verified delivery to be
	// enqueued (flow.go).
	Filter      []Condition
	Concurrency *Concurrency
	// Gather is the trigger's debounce or batch (gather.go); nil when it
	// runs each delivery on its own.
	Gather *Gather
	// Weight is the trigger's share in fair dispatch (dispatch.weight,
	// 1–100; DefaultWeight when the program names none).
	Weight int
	// CancelOn are the deliveries that cancel an entry of this trigger
	// (SPEC §2.3).
	CancelOn []CancelOn
	// Digest is the lowercase hex SHA-256 of Definition, the trigger's
	// object in the program file in canonical JSON, without its dispatch
	// field (digest.go): each entry records the digest it was accepted
	// under (version pinning, SPEC §2.3).
	Digest     string
	Definition json.RawMessage

	// Routes are the triggers that take their deliveries from this one
	// (SPEC §2.4), in the program's order; accepting is, for a route, the
	// trigger it takes them from (route.go).
	Routes    []*Trigger
	accepting *Trigger

	// listeners are the wait_for steps and cancel_on entries of the
	// program that name this trigger (waits.go); nil when none does.
	listeners *Listeners
}

// Source says how deliveries of a trigger are read and verified.
type Source struct {
	Kind         string
	EventID      EventIDSource
	MaxBodyBytes int64
	Verify       *Verify
	AllowFrom    []netip.Prefix // empty: every address
	RateLimit    *RateLimit
	// Redelivery is touba.RedeliveryAcknowledge (the default: 200
	// consumed) or touba.RedeliveryReject (409 TriggerReplayRejected).
	Redelivery string
	// Schedule is set for a "schedule" source (schedule_source.go); such
	// a trigger has no HTTP route and none of the webhook fields above.
	Schedule *Schedule
	// From is, for a route (kind "trigger", route.go), the ref of its
	// accepting trigger; a route has none of the webhook fields above of
	// its own (MaxBodyBytes and Redelivery are its accepting trigger's).
	From string
}

// EventIDSource names where the event id comes from: exactly one of Header
// and JSONPointer set. Required refuses a delivery that carries no id
// (TriggerEventIdMissing) instead of giving it a fresh identity.
type EventIDSource struct {
	Header      string
	JSONPointer string
	Required    bool
}

// Describe says where the id comes from and whether it is required, as
// `check` prints it: "header X-Github-Delivery (required)".
func (e EventIDSource) Describe() string {
	s := "header " + e.Header
	if e.JSONPointer != "" {
		s = "body " + e.JSONPointer
	}
	if e.Required {
		return s + " (required)"
	}
	return s + " (optional)"
}

// Verify is the signature scheme of a trigger. Several secrets may be
// given (`secrets`) so that one can be rotated without refusing deliveries.
type Verify struct {
	Scheme       string
	Header       string
	Encoding     string  // hmac-sha256: "hex" or "base64"; "" is hex
	Prefix       *string // hmac-sha256: nil is "sha256=", "" none
	Secrets      []secret.Ref
	ToleranceSec int64
	// Single says the program wrote one "secret" rather than a list of
	// "secrets" (refusals name the field the file holds).
	Single bool
}

// SecretPath is where the program wrote secret i, below the verify
// object: "secret" or "secrets[i]", so that a refusal names what the file
// holds.
func (v *Verify) SecretPath(i int) string {
	if v.Single {
		return "secret"
	}
	return strictjson.Index("secrets", i)
}

// Step is one step of a trigger: a tool call (Tool and Input), a sleep
// (Sleep) or a wait for another trigger's event (WaitFor); exactly one of
// Tool, Sleep and WaitFor is set (SPEC §2.3).
type Step struct {
	ID      string
	Tool    string
	Input   json.RawMessage
	Sleep   *Sleep
	WaitFor *WaitFor
	// When is the step's condition (SPEC §2.4): false skips the step
	// (output null, nothing journaled); nil always runs it.
	When *expr.Expr
	// Inputs are the {"$cel": EXPR} values of Input, compiled, by their
	// text.
	Inputs map[string]*expr.Expr
}

// Kind names the step's kind for messages and version pinning: the tool
// ref, "sleep" or "wait_for".
func (s Step) Kind() string {
	switch {
	case s.Sleep != nil:
		return "sleep"
	case s.WaitFor != nil:
		return "wait_for"
	}
	return s.Tool
}

// Sleep is a sleep step: MS milliseconds from when the step begins, or
// until the RFC 3339 time Until resolves to (a {"$ref"} into the run
// context, or a literal string); a time in the past does not wait.
type Sleep struct {
	MS    int64
	Until json.RawMessage
}

// WaitFor is a wait for an accepted delivery of Trigger whose value at On
// (a JSON pointer into {"headers", "body"}) equals what Match (a {"$ref"}
// into the run context, or a literal) resolves to. TimeoutMS 0 waits with
// no timeout; OnTimeout is "fail" (the default) or "continue".
type WaitFor struct {
	Trigger string
	Match   json.RawMessage
	// MatchCEL is Match's {"cel": EXPR}, compiled; nil for a $ref or a
	// literal.
	MatchCEL  *expr.Expr
	On        string
	TimeoutMS int64
	OnTimeout string
}

// Wait_for's on_timeout values.
const (
	OnTimeoutFail     = "fail"
	OnTimeoutContinue = "continue"
)

// CancelOn is one cancel_on entry of a trigger: a delivery of Trigger
// whose value at On equals what Match resolved to when this trigger's
// entry was accepted (a {"$ref"} into /event) cancels that entry.
type CancelOn struct {
	Trigger string
	Match   json.RawMessage
	On      string
	// MatchCEL is Match's {"cel": EXPR}, compiled; nil for a $ref.
	MatchCEL *expr.Expr
	match    []string // Match's pointer after "/event", for intake
	key      string   // its cancel key (by meaning), set at load: intake reads it per delivery
}

// Retry bounds the host's retries of a run.
type Retry struct {
	MaxAttempts       int
	InitialIntervalMS int64
	MaxIntervalMS     int64
}

// Lookup returns the trigger whose URL name is name.
func (p *Program) Lookup(name string) (*Trigger, bool) {
	t, ok := p.byName[name]
	return t, ok
}

// ToolRefs returns the tools named by any step, sorted and unique.
func (p *Program) ToolRefs() []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range p.Triggers {
		for _, s := range t.Steps {
			if s.Tool != "" && !seen[s.Tool] {
				seen[s.Tool] = true
				out = append(out, s.Tool)
			}
		}
	}
	sort.Strings(out)
	return out
}

// CheckTools refuses a step naming a tool that bound does not know.
func (p *Program) CheckTools(bound func(ref string) bool) error {
	w := newWalker(p.Path)
	for i, t := range p.Triggers {
		for j, s := range t.Steps {
			if s.Tool != "" && !bound(s.Tool) {
				return w.Fail(strictjson.Index(strictjson.Index("$.triggers", i)+".steps", j)+".tool", "tool %q is not bound in the manifest", s.Tool)
			}
		}
	}
	return nil
}

// UnsignedEventID says, for a verified trigger whose signature does not
// cover its event id, why a captured request can be replayed: sent again
// with a fresh id in an unsigned header, it passes verification and is a
// new event, so deduplication does not stop it (only the scheme's
// timestamp tolerance does, where it has one). It returns "" when the id
// is signed (read from the signed body, or Standard Webhooks' webhook-id)
// or the trigger is not verified at all.
func (t *Trigger) UnsignedEventID() string {
	v, id := t.Source.Verify, t.Source.EventID
	if v == nil || id.Header == "" {
		return ""
	}
	if v.Scheme == verify.SchemeStandardWebhooks && http.CanonicalHeaderKey(id.Header) == verify.StandardIDHeader {
		return ""
	}
	return fmt.Sprintf("the %s signature does not cover the event id header %s: a captured request re-sent with a fresh id "+
		"passes verification as a new event; read the id from the signed body (event_id.json_pointer) if the sender puts it there",
		v.Scheme, id.Header)
}
