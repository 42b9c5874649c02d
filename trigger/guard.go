package trigger

import (
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/forwarded"
)

// The intake checks of SPEC §3.1 that run before the body is read: the
// source address against source.allow_from and the trigger's rate limit.

// clientAddr is the address a request comes from (forwarded.ClientAddr:
// the TCP peer's, or what the trusted proxies forward).
func clientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	return forwarded.ClientAddr(r, trusted)
}

func inAny(list []netip.Prefix, a netip.Addr) bool { return forwarded.InAny(list, a) }

// limiter is a trigger's token bucket with the settings it was made for,
// so that a reload keeps a bucket whose settings did not change.
type limiter struct {
	rl RateLimit
	*rate.Limiter
}

// limiters builds the buckets of p, reusing those of old (by trigger ref)
// whose settings are the same: a SIGHUP must not hand a flood a fresh burst.
func limiters(p *Program, old map[string]*limiter) map[string]*limiter {
	out := map[string]*limiter{}
	if p == nil {
		return out
	}
	for _, t := range p.Triggers {
		rl := t.Source.RateLimit
		if rl == nil {
			continue
		}
		if l, ok := old[t.Ref]; ok && l.rl == *rl {
			out[t.Ref] = l
			continue
		}
		out[t.Ref] = &limiter{rl: *rl, Limiter: rate.NewLimiter(rate.Limit(rl.PerSecond), rl.Burst)}
	}
	return out
}

// take takes a token if one is there now; otherwise it returns how long
// until one is, in whole seconds and at least 1 (Retry-After).
func (l *limiter) take(now time.Time) (ok bool, retryAfterSec int) {
	res := l.ReserveN(now, 1)
	if !res.OK() {
		return false, 1
	}
	d := res.DelayFrom(now)
	if d == 0 {
		return true, 0
	}
	// Give the token back: a refused request must not push later ones
	// further out.
	res.CancelAt(now)
	return false, max(1, int(math.Ceil(d.Seconds())))
}

// admit runs the source-address and rate-limit checks of t, in that order,
// and answers the request itself when one refuses it.
func (in *Intake) admit(w http.ResponseWriter, r *http.Request, req *request, cfg *Config, t *Trigger) bool {
	if len(t.Source.AllowFrom) > 0 {
		if a := clientAddr(r, in.TrustedProxies); !inAny(t.Source.AllowFrom, a) {
			in.reject(w, r, req, touba.ETriggerSourceForbidden, "source address "+addrText(a)+" is not in source.allow_from", "")
			return false
		}
	}
	if l := cfg.limits[t.Ref]; l != nil {
		if ok, after := l.take(req.at); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(after))
			in.reject(w, r, req, touba.ETriggerRateLimited, "over the trigger's rate limit; retry after "+strconv.Itoa(after)+"s", "")
			return false
		}
	}
	return true
}

func addrText(a netip.Addr) string {
	if !a.IsValid() {
		return "(unreadable)"
	}
	return a.String()
}
