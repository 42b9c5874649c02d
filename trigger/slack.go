package trigger

import (
	"encoding/json"
	"net/http"

	"github.com/touba/touba-trigger/internal/httpjson"
	"github.com/touba/touba-trigger/verify"
)

// Slack's URL verification (where SPEC is silent): when an operator saves
// a Request URL, Slack POSTs a signed {"type": "url_verification",
// "challenge": C} and accepts the URL only if the answer is a 200 holding
// C. It carries no event id and is no event: answered only on a trigger
// that verifies Slack signatures, only once the signature is good, with
// no entry and a delivery log row of its own.

// LogURLVerification is the delivery log's code for a Slack URL
// verification answered with its challenge.
const LogURLVerification = "url_verification"

// slackChallenge is the challenge of body when t verifies Slack
// signatures and body is Slack's URL verification.
func slackChallenge(t *Trigger, body []byte) (string, bool) {
	if t.Source.Verify == nil || t.Source.Verify.Scheme != verify.SchemeSlack {
		return "", false
	}
	var m struct {
		Type      string  `json:"type"`
		Challenge *string `json:"challenge"`
	}
	if json.Unmarshal(body, &m) != nil || m.Type != "url_verification" || m.Challenge == nil {
		return "", false
	}
	return *m.Challenge, true
}

// answerChallenge answers a verified URL verification: 200 with the
// challenge, as Slack's documentation shows it.
func (in *Intake) answerChallenge(w http.ResponseWriter, r *http.Request, req *request, t *Trigger, challenge string) {
	httpjson.Write(w, http.StatusOK, struct {
		Challenge string `json:"challenge"`
	}{challenge})
	in.record(r, req, http.StatusOK, LogURLVerification, "")
	in.observe(t.Ref, LogURLVerification, http.StatusOK)
	in.Logger.Info().Str("trigger_ref", t.Ref).Msg("slack url verification answered")
}
