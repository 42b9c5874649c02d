package trigger

import (
	"time"

	"github.com/touba/touba-trigger/internal/strictjson"
	"github.com/touba/touba-trigger/schedule"
)

// Source kinds (SPEC §2.1, §2.3).
const (
	KindWebhook  = "webhook"
	KindSchedule = "schedule"
)

// catch_up values (SPEC §2.3): which ticks missed while no daemon ran are
// enqueued at start: the latest only (the default), every one within
// --retention, or none.
const (
	CatchUpLast = schedule.CatchUpLast
	CatchUpAll  = schedule.CatchUpAll
	CatchUpNone = schedule.CatchUpNone
)

// Schedule is a schedule source: a trigger whose entries are the ticks of
// a cron expression in a time zone, enqueued by package schedule.
type Schedule struct {
	Cron     *schedule.Cron
	Timezone string // as written; "UTC" when the program names none
	Location *time.Location
	CatchUp  string
}

// IsSchedule reports whether t is a schedule trigger (no HTTP route).
func (t *Trigger) IsSchedule() bool { return t.Source.Schedule != nil }

var (
	webhookFields  = []string{"kind", "event_id", "max_body_bytes", "verify", "allow_from", "rate_limit", "redelivery"}
	sourceFields   = append(append([]string{}, webhookFields...), "cron", "timezone", "catch_up")
	scheduleFields = map[string]bool{"kind": true, "cron": true, "timezone": true, "catch_up": true}
)

// schedule reads a schedule source; m holds the source's known fields.
// A webhook-only field is refused, not ignored: a schedule has no sender
// to verify, limit or identify.
func (w walker) schedule(path string, m strictjson.Fields) (*Schedule, error) {
	for _, k := range sourceFields {
		if _, ok := m[k]; ok && !scheduleFields[k] {
			return nil, w.Fail(path+"."+k, `only a "webhook" source takes %s; a schedule has no sender (known for a schedule: catch_up, cron, kind, timezone)`, k)
		}
	}
	raw, ok := m["cron"]
	if !ok {
		return nil, w.Fail(path+".cron", "required field is missing")
	}
	expr, err := w.Str(path+".cron", raw)
	if err != nil {
		return nil, err
	}
	s := &Schedule{Timezone: "UTC", CatchUp: CatchUpLast}
	if s.Cron, err = schedule.Parse(expr); err != nil {
		return nil, w.Fail(path+".cron", "%v", err)
	}
	if v, ok := m["timezone"]; ok {
		if s.Timezone, err = w.NonEmpty(path+".timezone", v); err != nil {
			return nil, err
		}
	}
	// "Local" would make a tick depend on the host's settings.
	if s.Timezone == "Local" {
		return nil, w.Fail(path+".timezone", `must be an IANA time zone name such as "Europe/Paris" or "UTC"`)
	}
	if s.Location, err = time.LoadLocation(s.Timezone); err != nil {
		return nil, w.Fail(path+".timezone", "unknown time zone %q (want an IANA name such as \"Europe/Paris\" or \"UTC\")", s.Timezone)
	}
	if v, ok := m["catch_up"]; ok {
		if s.CatchUp, err = w.Str(path+".catch_up", v); err != nil {
			return nil, err
		}
		switch s.CatchUp {
		case CatchUpLast, CatchUpAll, CatchUpNone:
		default:
			return nil, w.Fail(path+".catch_up", `must be "last", "all" or "none"`)
		}
	}
	return s, nil
}
