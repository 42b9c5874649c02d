package server_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/mattn/go-sqlite3"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/schedule"
	"github.com/touba/touba-trigger/server"
)

// Schedules (SPEC §2.3) on a real daemon, in process, on a Manual clock:
// the test moves time and waits for the entries the ticks make.

const scheduleManifest = `{"manifest_version":"touba-manifest-v1","bindings":{"tool:sched/Note":{
	"handler":{"kind":"accounting_stub"},"timeout_ms":5000,"effect_contract":{"kind":"none"}}}}`

// scheduleProgram is a program of schedule triggers, name → source.
func scheduleProgram(sources ...string) string {
	var ts []string
	for i := 0; i+1 < len(sources); i += 2 {
		ts = append(ts, `{"ref":"trigger:`+sources[i]+`","source":`+sources[i+1]+`,
			"steps":[{"id":"note","tool":"tool:sched/Note","input":{"at":{"$ref":"/event/body/scheduled_for"}}}]}`)
	}
	return `{"air_version":"touba-air-v1","triggers":[` + strings.Join(ts, ",") + `]}`
}

type schedDir struct {
	dir, program, manifest, queue string
}

func newSchedDir(t *testing.T, program string) *schedDir {
	t.Helper()
	d := &schedDir{dir: t.TempDir()}
	d.program, d.manifest = filepath.Join(d.dir, "program.air.json"), filepath.Join(d.dir, "touba.manifest.json")
	d.queue = filepath.Join(d.dir, "queue.sqlite")
	d.write(t, program)
	if err := os.WriteFile(d.manifest, []byte(scheduleManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *schedDir) write(t *testing.T, program string) {
	t.Helper()
	if err := os.WriteFile(d.program, []byte(program), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (d *schedDir) start(t *testing.T, clock schedule.Clock, retention time.Duration) *testkit.Server {
	t.Helper()
	return testkit.StartServer(t, server.Config{Program: d.program, Manifest: d.manifest, Queue: d.queue,
		State: filepath.Join(d.dir, "state.sqlite"), Workers: 1, Retention: retention, ScheduleClock: clock})
}

// ticks are the event ids of ref's entries, read from the queue file of a
// running daemon (read-only, beside its writer).
func (d *schedDir) ticks(t *testing.T, ref string) []string {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+d.queue+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return queryStrings(t, db, `SELECT event_id FROM entries WHERE trigger_ref = ? ORDER BY event_id`, ref)
}

// logged are the event ids of ref's delivery log rows: a tick intake did
// not take as new (a duplicate, or a redelivery of a consumed entry).
func (d *schedDir) logged(t *testing.T, ref string) []string {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(d.dir, "state.sqlite")+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return queryStrings(t, db, `SELECT event_id FROM deliveries WHERE trigger_ref = ? ORDER BY event_id`, ref)
}

func queryStrings(t *testing.T, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func at(hhmm string) time.Time {
	t, err := time.Parse(time.RFC3339, "2026-12-01T"+hhmm+"Z")
	if err != nil {
		panic(err)
	}
	return t
}

func waitTick(t *testing.T, d *schedDir, ref, id string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() bool { return slices.Contains(d.ticks(t, ref), id) }, "the tick "+id+" of "+ref)
}

// A tick is enqueued once, when the clock reaches it; a restart enqueues
// no tick already enqueued, and the ticks missed while no daemon ran are
// enqueued per catch_up: the latest (last), each one within --retention
// (all), or none.
func TestScheduleTicksAndCatchUp(t *testing.T) {
	for _, tc := range []struct {
		catchUp   string
		retention time.Duration
		want      []string // after a stop from 10:11 to 10:45 and the 10:50 tick
	}{
		{"last", 0, []string{"10:10", "10:40", "10:50"}},
		{"all", 0, []string{"10:10", "10:20", "10:30", "10:40", "10:50"}},
		{"all", 25 * time.Minute, []string{"10:10", "10:30", "10:40", "10:50"}},
		{"none", 0, []string{"10:10", "10:50"}},
	} {
		t.Run(tc.catchUp+"/"+tc.retention.String(), func(t *testing.T) {
			const ref = "trigger:every/Ten"
			d := newSchedDir(t, scheduleProgram("every/Ten", `{"kind":"schedule","cron":"*/10 * * * *","catch_up":"`+tc.catchUp+`"}`))
			clock := schedule.NewManual(at("10:05:00"))
			s := d.start(t, clock, tc.retention)
			clock.Set(at("10:10:00"))
			waitTick(t, d, ref, "2026-12-01T10:10:00Z")
			clock.Set(at("10:11:00"))
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}

			clock = schedule.NewManual(at("10:45:00"))
			s = d.start(t, clock, tc.retention)
			s.WaitLog("schedule started", 10*time.Second)
			// The scheduler works in time order: once the 10:50 tick is
			// in, the catch-up before it is done.
			clock.Set(at("10:50:00"))
			waitTick(t, d, ref, "2026-12-01T10:50:00Z")
			var want []string
			for _, w := range tc.want {
				want = append(want, "2026-12-01T"+w+":00Z")
			}
			if got := d.ticks(t, ref); !slices.Equal(got, want) {
				t.Fatalf("ticks %v, want %v", got, want)
			}
			// Nothing was offered twice: intake logged no duplicate.
			if got := d.logged(t, ref); len(got) != 0 {
				t.Fatalf("delivery log rows %v, want none (no tick enqueued twice)", got)
			}
		})
	}
}

// A restart within the same minute as the tick it enqueued, and a first
// start, enqueue nothing: nothing was missed.
func TestScheduleRestartEnqueuesNothingTwice(t *testing.T) {
	const ref = "trigger:every/Minute"
	d := newSchedDir(t, scheduleProgram("every/Minute", `{"kind":"schedule","cron":"* * * * *","catch_up":"all"}`))
	clock := schedule.NewManual(at("10:00:30"))
	s := d.start(t, clock, 0)
	clock.Set(at("10:01:00"))
	waitTick(t, d, ref, "2026-12-01T10:01:00Z")
	s.Stop()
	clock = schedule.NewManual(at("10:01:40"))
	s = d.start(t, clock, 0)
	s.WaitLog("schedule started", 10*time.Second)
	clock.Set(at("10:02:00"))
	waitTick(t, d, ref, "2026-12-01T10:02:00Z")
	if got, want := d.ticks(t, ref), []string{"2026-12-01T10:01:00Z", "2026-12-01T10:02:00Z"}; !slices.Equal(got, want) {
		t.Fatalf("ticks %v, want %v (none before the first start, none twice)", got, want)
	}
	if got := d.logged(t, ref); len(got) != 0 {
		t.Fatalf("delivery log rows %v, want none", got)
	}
}

// SIGHUP picks up a changed schedule: the new cron ticks from the reload
// on, the old one no more, and a schedule added by the reload starts then.
func TestScheduleReload(t *testing.T) {
	d := newSchedDir(t, scheduleProgram("every/Job", `{"kind":"schedule","cron":"*/10 * * * *"}`))
	clock := schedule.NewManual(at("10:05:00"))
	s := d.start(t, clock, 0)
	clock.Set(at("10:10:00"))
	waitTick(t, d, "trigger:every/Job", "2026-12-01T10:10:00Z")

	d.write(t, scheduleProgram("every/Job", `{"kind":"schedule","cron":"*/15 * * * *"}`,
		"every/New", `{"kind":"schedule","cron":"0,30 * * * *","timezone":"Europe/Paris"}`))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.WaitLog("configuration reloaded", 10*time.Second)
	s.WaitLog("schedule changed; it starts from now", 10*time.Second)
	clock.Set(at("10:15:00"))
	waitTick(t, d, "trigger:every/Job", "2026-12-01T10:15:00Z")
	clock.Set(at("10:20:00"))
	clock.Set(at("10:30:00"))
	waitTick(t, d, "trigger:every/Job", "2026-12-01T10:30:00Z")
	waitTick(t, d, "trigger:every/New", "2026-12-01T10:30:00Z")
	if got, want := d.ticks(t, "trigger:every/Job"), []string{"2026-12-01T10:10:00Z", "2026-12-01T10:15:00Z", "2026-12-01T10:30:00Z"}; !slices.Equal(got, want) {
		t.Fatalf("ticks %v, want %v (the old cron's 10:20 not among them)", got, want)
	}
}

// A POST to a schedule trigger is answered 404 TriggerNotFound: only the
// daemon makes ticks.
func TestSchedulePostIsNotFound(t *testing.T) {
	d := newSchedDir(t, scheduleProgram("every/Job", `{"kind":"schedule","cron":"0 3 * * *"}`))
	s := d.start(t, schedule.NewManual(at("10:05:00")), 0)
	status, _ := testkit.Post(t, s.URL()+"/triggers/every/Job", "2026-12-01T10:10:00Z", `{"scheduled_for":"2026-12-01T10:10:00Z"}`)
	if status != 404 {
		t.Fatalf("POST to a schedule trigger: %d, want 404", status)
	}
	if got := d.ticks(t, "trigger:every/Job"); len(got) != 0 {
		t.Fatalf("entries %v after a POST, want none", got)
	}
}

// Two nodes on one PostgreSQL database both enqueue every tick; the
// identity rule keeps one entry, and the other node's try is in the
// delivery log as intake's answer to a repeat (duplicate or consumed).
func TestScheduleTwoNodesOneEntry(t *testing.T) {
	dsn := pgtest.New(t)
	const ref = "trigger:every/Minute"
	d := newSchedDir(t, scheduleProgram("every/Minute", `{"kind":"schedule","cron":"* * * * *"}`))
	clock := schedule.NewManual(at("10:00:30"))
	var nodes []*testkit.Server
	for i := range 2 {
		nodes = append(nodes, testkit.StartServer(t, server.Config{Program: d.program, Manifest: d.manifest, Database: dsn,
			NodeID: fmt.Sprintf("node-%d", i), Workers: 1, LeaseTTL: 10 * time.Second, ScheduleClock: clock}))
	}
	for _, n := range nodes {
		n.WaitLog("schedule started", 10*time.Second)
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	count := func(q, id string) int {
		var c int
		if err := conn.QueryRow(context.Background(), q, ref, id).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tick := range []string{"10:01", "10:02", "10:03"} {
		id := "2026-12-01T" + tick + ":00Z"
		clock.Set(at(tick + ":00"))
		// Both nodes tried: one made the entry and logged "tick
		// enqueued", the other's try is a delivery log row.
		testkit.WaitFor(t, 10*time.Second, func() bool {
			return count(`SELECT COUNT(*) FROM touba.deliveries WHERE trigger_ref = $1 AND event_id = $2`, id) == 1
		}, "the second node's try of "+id)
		if n := count(`SELECT COUNT(*) FROM touba.entries WHERE trigger_ref = $1 AND event_id = $2`, id); n != 1 {
			t.Fatalf("%d entries for the tick %s, want 1", n, id)
		}
	}
	enqueued := 0
	for _, n := range nodes {
		enqueued += strings.Count(n.Log(), `"message":"tick enqueued"`)
	}
	if enqueued != 3 {
		t.Fatalf("%d ticks enqueued over both nodes, want 3", enqueued)
	}
}

// The catch-up on PostgreSQL: the newest tick is read from the shared
// queue, so a node restarted after a stop enqueues the latest missed tick
// (catch_up last) and nothing twice.
func TestScheduleCatchUpOnPostgres(t *testing.T) {
	dsn := pgtest.New(t)
	const ref = "trigger:every/Ten"
	d := newSchedDir(t, scheduleProgram("every/Ten", `{"kind":"schedule","cron":"*/10 * * * *"}`))
	start := func(clock schedule.Clock) *testkit.Server {
		return testkit.StartServer(t, server.Config{Program: d.program, Manifest: d.manifest, Database: dsn,
			NodeID: "node-a", Workers: 1, LeaseTTL: 10 * time.Second, ScheduleClock: clock})
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	ticks := func() []string {
		rows, err := conn.Query(context.Background(), `SELECT event_id FROM touba.entries WHERE trigger_ref = $1 ORDER BY event_id`, ref)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	clock := schedule.NewManual(at("10:05:00"))
	s := start(clock)
	clock.Set(at("10:10:00"))
	testkit.WaitFor(t, 10*time.Second, func() bool { return len(ticks()) == 1 }, "the 10:10 tick")
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	clock = schedule.NewManual(at("10:45:00"))
	start(clock)
	clock.Set(at("10:50:00"))
	testkit.WaitFor(t, 10*time.Second, func() bool { return slices.Contains(ticks(), "2026-12-01T10:50:00Z") }, "the 10:50 tick")
	if got, want := ticks(), []string{"2026-12-01T10:10:00Z", "2026-12-01T10:40:00Z", "2026-12-01T10:50:00Z"}; !slices.Equal(got, want) {
		t.Fatalf("ticks %v, want %v", got, want)
	}
}
