package server

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/trigger"
)

// After a reload, every secret check uses every value loaded since start:
// a token the new configuration dropped is still refused by the
// dispatcher's filter, intake's kept headers and the journal.
func TestReloadSecretsOnlyGrow(t *testing.T) {
	first := &secret.Set{}
	first.Add("old-token-1f9a")
	d := &Server{secrets: first, intake: &trigger.Intake{}, log: zerolog.Nop(), store: &stores{}}
	d.current.Store(&dispatcher.Config{Secrets: first})
	d.intake.SetConfig(&trigger.Config{Secrets: first})

	second := &secret.Set{}
	second.Add("new-token-77c2")
	next := &Loaded{Secrets: second, Intake: &trigger.Config{Secrets: second}}
	nd := &dispatcher.Config{Secrets: second}
	d.install(next, nd)

	for name, s := range map[string]*secret.Set{"dispatcher": d.current.Load().Secrets,
		"intake": next.Intake.Secrets, "journal": d.secrets} {
		for _, v := range []string{"old-token-1f9a", "new-token-77c2"} {
			if !s.Contains("x" + v + "x") {
				t.Errorf("%s secret set misses %q after a reload", name, v)
			}
		}
	}
}
