package worker

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/forwarded"
	"github.com/touba/touba-trigger/internal/guesses"
	"github.com/touba/touba-trigger/internal/httpjson"
)

// The wire of SPEC §4.3, on the daemon's listener.
const (
	TakePath   = "/workers/v1/take"
	AnswerPath = "/workers/v1/answer"
	// Prefix is what the daemon's listener routes here.
	Prefix = "/workers/v1/"

	// MaxWait bounds a take's wait_ms; DefaultWait is a take's wait
	// without one.
	MaxWait     = 60 * time.Second
	DefaultWait = 30 * time.Second
	// maxTake bounds a take's max.
	maxTake = 1000
	// takeBodyLimit bounds a take request's body.
	takeBodyLimit = 64 << 10
)

// Wire serves /workers/v1/take and /workers/v1/answer.
type Wire struct {
	Hub *Hub
	// Runners are the worker bindings in force (a reload changes them).
	Runners func() []*Runner
	// Trusted are the proxies whose X-Forwarded-For names the client, for
	// the throttle of wrong tokens.
	Trusted []netip.Prefix
	Log     zerolog.Logger

	guesses *guesses.Table
}

// NewWire returns the wire over hub.
func NewWire(hub *Hub, runners func() []*Runner, trusted []netip.Prefix, log zerolog.Logger) *Wire {
	return &Wire{Hub: hub, Runners: runners, Trusted: trusted, Log: log, guesses: guesses.New(time.Now, guesses.Entries)}
}

// ServeHTTP answers one request of the wire.
func (w *Wire) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.URL.Path != TakePath && r.URL.Path != AnswerPath {
		httpjson.Error(rw, http.StatusNotFound, touba.ENotFound, "no such path "+r.URL.Path, "")
		return
	}
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		httpjson.Error(rw, http.StatusMethodNotAllowed, touba.EMethodNotAllowed, "method "+r.Method+" not allowed", "")
		return
	}
	served, ok := w.authorize(rw, r)
	if !ok {
		return
	}
	if r.URL.Path == TakePath {
		w.take(rw, r, served)
		return
	}
	w.answer(rw, r, served)
}

// authorize finds the bindings the request's bearer token serves, each
// token compared in constant time, and the address throttled like the
// console's on a wrong one (SPEC §6.1).
func (w *Wire) authorize(rw http.ResponseWriter, r *http.Request) (map[string]*Runner, bool) {
	tok, isBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	client := forwarded.ClientAddr(r, w.Trusted)
	var served map[string]*Runner
	ok, wait, failures := w.guesses.Attempt(guesses.Key(client), func() bool {
		served = w.match(tok)
		return isBearer && len(served) > 0
	})
	if wait > 0 {
		rw.Header().Set("Retry-After", strconv.Itoa(int(wait.Round(time.Second)/time.Second)+1))
		httpjson.Error(rw, http.StatusTooManyRequests, touba.EWorkerThrottled, "too many wrong tokens from this address; retry later", "")
		return nil, false
	}
	if !ok {
		w.Log.Warn().Str("client_addr", client.String()).Str("path", r.URL.Path).Int("failures", failures).
			Msg("worker token refused")
		httpjson.Error(rw, http.StatusUnauthorized, touba.EWorkerUnauthorized, "a worker binding's token is required (Authorization: Bearer)", "")
		return nil, false
	}
	return served, true
}

// match is the bindings whose token is tok. Every binding's token is
// compared, each as a SHA-256 digest so the comparison takes as long
// whatever the lengths.
func (w *Wire) match(tok string) map[string]*Runner {
	got := sha256.Sum256([]byte(tok))
	out := map[string]*Runner{}
	for _, r := range w.Runners() {
		want := sha256.Sum256([]byte(r.Token()))
		if subtle.ConstantTimeCompare(got[:], want[:]) == 1 && tok != "" {
			out[r.Ref()] = r
		}
	}
	return out
}

// takeRequest is the body of a take.
type takeRequest struct {
	Tools  []string `json:"tools"`
	Max    *int     `json:"max"`
	WaitMS *int64   `json:"wait_ms"`
}

func (w *Wire) take(rw http.ResponseWriter, r *http.Request, served map[string]*Runner) {
	var tr takeRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, takeBodyLimit)).Decode(&tr); err != nil {
		httpjson.Error(rw, http.StatusBadRequest, touba.EBadRequest, "take body: "+err.Error(), "")
		return
	}
	if len(tr.Tools) == 0 {
		httpjson.Error(rw, http.StatusBadRequest, touba.EBadRequest, "tools: at least one tool ref is required", "")
		return
	}
	for _, t := range tr.Tools {
		if served[t] == nil {
			httpjson.Error(rw, http.StatusForbidden, touba.EWorkerForbidden, "this token does not serve "+t, "")
			return
		}
	}
	n, wait := 1, DefaultWait
	if tr.Max != nil {
		if *tr.Max < 1 || *tr.Max > maxTake {
			httpjson.Error(rw, http.StatusBadRequest, touba.EBadRequest, "max: between 1 and "+strconv.Itoa(maxTake), "")
			return
		}
		n = *tr.Max
	}
	if tr.WaitMS != nil {
		if *tr.WaitMS < 0 || *tr.WaitMS > MaxWait.Milliseconds() {
			httpjson.Error(rw, http.StatusBadRequest, touba.EBadRequest, "wait_ms: between 0 and "+strconv.FormatInt(MaxWait.Milliseconds(), 10), "")
			return
		}
		wait = time.Duration(*tr.WaitMS) * time.Millisecond
	}
	// The listener's write timeout is shorter than a long poll.
	_ = http.NewResponseController(rw).SetWriteDeadline(time.Now().Add(wait + 30*time.Second))
	calls := w.Hub.Take(r.Context(), dedupe(tr.Tools), n, wait)
	var b bytes.Buffer
	b.WriteString(`{"calls":[`)
	for i, c := range calls {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(bytes.TrimRight(c, "\n"))
	}
	b.WriteString("]}\n")
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(http.StatusOK)
	_, _ = rw.Write(b.Bytes())
}

func (w *Wire) answer(rw http.ResponseWriter, r *http.Request, served map[string]*Runner) {
	var limit int64
	for _, s := range served {
		limit = max(limit, s.MaxPayload())
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+64<<10))
	if err != nil {
		httpjson.Error(rw, http.StatusBadRequest, touba.EBadRequest, "answer body: "+err.Error(), "")
		return
	}
	var a struct {
		CallID string `json:"call_id"`
	}
	if err := json.Unmarshal(body, &a); err != nil || a.CallID == "" {
		httpjson.Error(rw, http.StatusBadRequest, touba.EBadRequest, "answer: a JSON object with call_id is required", "")
		return
	}
	if err := w.Hub.Answer(a.CallID, func(ref string) bool { return served[ref] != nil }, body); err != nil {
		httpjson.Error(rw, http.StatusConflict, touba.EWorkerCallNotHeld,
			"call "+a.CallID+" is not held by a worker of this token (timed out, answered already, or unknown); the answer is not used", "")
		return
	}
	httpjson.Write(rw, http.StatusOK, map[string]string{"status": "recorded"})
}

func dedupe(refs []string) []string {
	seen := map[string]bool{}
	out := refs[:0:0]
	for _, r := range refs {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}
