package trigger_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

func scheduleProgram(source string) string {
	return `{"air_version":"touba-air-v1","triggers":[{"ref":"trigger:nightly","source":` + source +
		`,"steps":[{"id":"s","tool":"tool:a/B"}]}]}`
}

func TestParseProgram_Schedule(t *testing.T) {
	p, err := trigger.ParseProgram("p.json", []byte(scheduleProgram(`{"kind":"schedule","cron":"0 3 * * *","timezone":"Europe/Paris"}`)))
	if err != nil {
		t.Fatal(err)
	}
	tr := p.Triggers[0]
	sc := tr.Source.Schedule
	if !tr.IsSchedule() || sc == nil {
		t.Fatalf("trigger %+v is not a schedule", tr)
	}
	if got, want := sc.CatchUp, "last"; got != want {
		t.Fatalf("catch_up=%q, want %q (the default)", got, want)
	}
	if got, want := sc.Location.String(), "Europe/Paris"; got != want {
		t.Fatalf("location=%q, want %q", got, want)
	}
	p, err = trigger.ParseProgram("p.json", []byte(scheduleProgram(`{"kind":"schedule","cron":"*/5 * * * *","catch_up":"all"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if sc := p.Triggers[0].Source.Schedule; sc.Timezone != "UTC" || sc.CatchUp != "all" {
		t.Fatalf("schedule %+v, want timezone UTC by default and catch_up all", sc)
	}
}

func TestParseProgram_ScheduleRefuses(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"cron missing", scheduleProgram(`{"kind":"schedule"}`), `$.triggers[0].source.cron: required field is missing`},
		{"cron bad", scheduleProgram(`{"kind":"schedule","cron":"0 3 * *"}`),
			`$.triggers[0].source.cron: cron "0 3 * *": want 5 fields (minute hour day-of-month month day-of-week), got 4`},
		{"cron out of range", scheduleProgram(`{"kind":"schedule","cron":"0 25 * * *"}`),
			`$.triggers[0].source.cron: cron "0 25 * * *": hour: value "25" must be a number from 0 to 23`},
		{"cron never", scheduleProgram(`{"kind":"schedule","cron":"0 0 30 2 *"}`),
			`$.triggers[0].source.cron: cron "0 0 30 2 *": never matches (no month has that day)`},
		{"cron number", scheduleProgram(`{"kind":"schedule","cron":5}`), `$.triggers[0].source.cron: must be a string (got number)`},
		{"zone unknown", scheduleProgram(`{"kind":"schedule","cron":"0 3 * * *","timezone":"Europe/Lutece"}`),
			`$.triggers[0].source.timezone: unknown time zone "Europe/Lutece" (want an IANA name such as "Europe/Paris" or "UTC")`},
		{"zone local", scheduleProgram(`{"kind":"schedule","cron":"0 3 * * *","timezone":"Local"}`),
			`$.triggers[0].source.timezone: must be an IANA time zone name such as "Europe/Paris" or "UTC"`},
		{"catch_up bad", scheduleProgram(`{"kind":"schedule","cron":"0 3 * * *","catch_up":"first"}`),
			`$.triggers[0].source.catch_up: must be "last", "all" or "none"`},
		{"verify on schedule", scheduleProgram(`{"kind":"schedule","cron":"0 3 * * *","verify":{"scheme":"github","secret":{"env":"X"}}}`),
			`$.triggers[0].source.verify: only a "webhook" source takes verify; a schedule has no sender (known for a schedule: catch_up, cron, kind, timezone)`},
		{"event_id on schedule", scheduleProgram(`{"kind":"schedule","cron":"0 3 * * *","event_id":{"header":"x"}}`),
			`$.triggers[0].source.event_id: only a "webhook" source takes event_id; a schedule has no sender (known for a schedule: catch_up, cron, kind, timezone)`},
		{"unknown on schedule", scheduleProgram(`{"kind":"schedule","cron":"0 3 * * *","every":"1h"}`),
			`$.triggers[0].source.every: unknown field (known: allow_from, catch_up, cron, event_id, kind, max_body_bytes, rate_limit, redelivery, timezone, verify)`},
		{"cron on webhook", scheduleProgram(`{"kind":"webhook","cron":"0 3 * * *"}`),
			`$.triggers[0].source.cron: unknown field (known: allow_from, event_id, kind, max_body_bytes, rate_limit, redelivery, verify)`},
		{"filter on schedule", `{"air_version":"touba-air-v1","triggers":[{"ref":"trigger:nightly","source":{"kind":"schedule","cron":"0 3 * * *"},` +
			`"filter":[{"pointer":"/body/x","exists":true}],"steps":[{"id":"s","tool":"tool:a/B"}]}]}`,
			`$.triggers[0].filter: a schedule trigger takes no filter: every tick is enqueued`},
		{"sleep step bad", `{"air_version":"touba-air-v1","triggers":[{"ref":"trigger:nightly","source":{"kind":"schedule","cron":"0 3 * * *"},` +
			`"steps":[{"id":"s","sleep":{"ms":0}}]}]}`,
			"$.triggers[0].steps[0].sleep.ms: must be a positive integer (got 0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trigger.ParseProgram("p.json", []byte(tc.src))
			if got, want := errString(err), "p.json: "+tc.want; got != want {
				t.Fatalf("err=%s\nwant %s", got, want)
			}
		})
	}
}

type recordingQueue struct{ got []*touba.Delivery }

func (q *recordingQueue) Enqueue(_ context.Context, d *touba.Delivery) (touba.EnqueueResult, error) {
	for _, e := range q.got {
		if e.TriggerRef == d.TriggerRef && e.EventID == d.EventID {
			return touba.EnqueueResult{QueueID: e.QueueID, Digest: e.Digest, Status: touba.StatusPending}, nil
		}
	}
	d.QueueID = "q" + d.EventID
	q.got = append(q.got, d)
	return touba.EnqueueResult{QueueID: d.QueueID, Created: true}, nil
}

type recordingLog struct{ rows []*touba.LoggedDelivery }

func (l *recordingLog) Log(d *touba.LoggedDelivery) { l.rows = append(l.rows, d) }

// A schedule trigger has no route: a POST to it is TriggerNotFound, so
// nobody can forge a tick. Its ticks go through intake's identity rule:
// the second of one tick is a duplicate of the first, logged as such.
func TestIntake_ScheduleTicks(t *testing.T) {
	p, err := trigger.ParseProgram("p.json", []byte(scheduleProgram(`{"kind":"schedule","cron":"0 3 * * *","timezone":"Europe/Paris"}`)))
	if err != nil {
		t.Fatal(err)
	}
	q, log := &recordingQueue{}, &recordingLog{}
	in := &trigger.Intake{Queue: q, Log: log}
	in.SetConfig(&trigger.Config{Program: p})

	rec := httptest.NewRecorder()
	in.Router(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/triggers/nightly", bytes.NewBufferString(`{"scheduled_for":"x"}`)))
	if rec.Code != http.StatusNotFound || !bytes.Contains(rec.Body.Bytes(), []byte(touba.ETriggerNotFound)) {
		t.Fatalf("POST to a schedule: %d %s, want 404 TriggerNotFound", rec.Code, rec.Body)
	}
	if len(q.got) != 0 {
		t.Fatalf("POST to a schedule enqueued %d entries", len(q.got))
	}

	at := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	for i, want := range []string{touba.IntakeEnqueued, touba.IntakeDuplicate} {
		status, id, err := in.EnqueueTick(context.Background(), "trigger:nightly", at)
		if err != nil || status != want || id != "q2026-12-02T02:00:00Z" {
			t.Fatalf("tick %d: %q %q %v, want %s", i, status, id, err, want)
		}
	}
	if got, want := string(q.got[0].Body), `{"scheduled_for":"2026-12-02T02:00:00Z"}`; len(q.got) != 1 || got != want {
		t.Fatalf("entries %d, body %s, want 1 with %s", len(q.got), got, want)
	}
	last := log.rows[len(log.rows)-1]
	if last.EventID != "2026-12-02T02:00:00Z" || last.StatusCode != http.StatusAccepted || last.QueueID != q.got[0].QueueID {
		t.Fatalf("duplicate tick logged as %+v", last)
	}
	if _, _, err := in.EnqueueTick(context.Background(), "trigger:other", at); touba.ErrorCode(err) != touba.ETriggerNotFound {
		t.Fatalf("tick of no schedule: %v, want TriggerNotFound", err)
	}
}
