package console

import (
	"net/netip"
	"time"

	"github.com/touba/touba-trigger/internal/guesses"
)

// Throttling of token guesses (the login form and Authorization: Bearer),
// per client address (auth.guess): package guesses, which the workers'
// tokens share (SPEC §4.3).

const (
	throttleEntries = guesses.Entries
	freeFailures    = guesses.FreeFailures
	firstDelay      = guesses.FirstDelay
	maxDelay        = guesses.MaxDelay
	forgetAfter     = guesses.ForgetAfter
)

type throttle = guesses.Table

func newThrottle(now func() time.Time, max int) *throttle { return guesses.New(now, max) }

func throttleKey(a netip.Addr) netip.Prefix { return guesses.Key(a) }
