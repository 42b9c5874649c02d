package dispatcher

import (
	"time"

	"github.com/cenkalti/backoff/v4"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// delay is the wait before attempt n+1 of a run under r: exponential from
// the initial interval, capped, with jitter so that entries failing
// together do not come back together.
func delay(r trigger.Retry, attempt int) time.Duration {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = time.Duration(r.InitialIntervalMS) * time.Millisecond
	b.MaxInterval = time.Duration(r.MaxIntervalMS) * time.Millisecond
	b.Multiplier = 2
	b.RandomizationFactor = 0.2
	b.MaxElapsedTime = 0
	b.Reset()
	d := b.NextBackOff()
	for i := 1; i < attempt; i++ {
		d = b.NextBackOff()
	}
	return d
}

// permanent codes fail the entry at once: retrying cannot change them.
var permanent = map[string]bool{
	touba.EStepInputUnresolved:    true,
	touba.EExpressionFailed:       true, // an expression gives the same error every time (SPEC §2.4)
	touba.EEffectRequestConflict:  true,
	touba.EHandlerPayloadTooLarge: true,
	touba.EGrantMissing:           true,
	touba.EWebhookRejected:        true,
	touba.EHttpRejected:           true,
	touba.EEgressForbidden:        true,
	touba.EBrokerRejected:         true,
	touba.ETriggerNotFound:        true,
	"ToolRefMismatch":             true,
	"ToolInputInvalid":            true,
	"ToolNotBound":                true,
}
