package postgres

import (
	"fmt"
	"time"
)

// Lease expiry is decided by the database's clock (SPEC §8), never a
// node's: a lease is set to expire at the database's now() plus
// --lease-ttl, and is expired when the database's now() passed it, so a
// node whose clock runs ahead takes nothing over early, and one behind
// keeps nothing longer. Times are stored as text in touba.FormatTime's
// layout, so they compare as text.

// dbTime is the SQL expression of the database's now() plus d, in
// touba.FormatTime's layout. d is the node's own arithmetic (a TTL), and
// ClockOffset's shift for tests.
func (d *db) dbTime(plus time.Duration) string {
	plus = d.clockShift(plus)
	return fmt.Sprintf(`to_char((now() + interval '%d milliseconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`,
		plus.Milliseconds())
}

// clockShift is plus with the tests' ClockOffset added.
func (d *db) clockShift(plus time.Duration) time.Duration {
	if d.cfg.ClockOffset != nil {
		plus += d.cfg.ClockOffset()
	}
	return plus
}

// dbNow is the database's now() as text.
func (d *db) dbNow() string { return d.dbTime(0) }

// dbExpiry is when a lease taken or renewed now ends.
func (d *db) dbExpiry() string { return d.dbTime(d.cfg.LeaseTTL) }

// dbFresh is the expiry of a lease taken or renewed within the last
// second (a tenth of --lease-ttl when that is shorter). A call's fence
// extends a lease by the whole --lease-ttl only when it ends before that:
// a fresher one already leaves the call --lease-ttl less that second,
// which start-up made longer than every binding's timeout by 4 s or more
// (server.checkLeaseTTL asks 5), so the fence only locks it. An extension
// is a new version of the entry's row; the lock is not.
func (d *db) dbFresh() string {
	return d.dbTime(d.cfg.LeaseTTL - min(time.Second, d.cfg.LeaseTTL/10))
}
