// Command river is the PostgreSQL yardstick of scripts/bench-pg: River
// (riverqueue/river) draining no-op jobs on the same throwaway cluster as
// touba-trigger's dispatch benchmark. It is a module of its own so that the
// daemon's module never depends on River.
//
//	river drain URL N W COOLDOWN   migrate River's schema, insert N no-op jobs, drain them
//	                               with W workers and FetchCooldown COOLDOWN; print
//	                               jobs_per_s and the client's CPU µs per job (getrusage)
//	river snap URL                 print the counters bench-pg takes deltas of: the whole
//	                               cluster's CPU (every postgres process from /proc, exited
//	                               backends through the postmaster's cutime/cstime), and, for
//	                               URL's database, commits, statements (pg_stat_statements),
//	                               rows written (tup_inserted+updated+deleted) and WAL bytes
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func main() {
	log.SetFlags(0)
	if len(os.Args) < 3 {
		log.Fatal("usage: river drain URL N W COOLDOWN | snap URL")
	}
	ctx := context.Background()
	switch os.Args[1] {
	case "drain":
		if len(os.Args) != 6 {
			log.Fatal("usage: river drain URL N W COOLDOWN")
		}
		cool, err := time.ParseDuration(os.Args[5])
		if err != nil {
			log.Fatal(err)
		}
		drain(ctx, os.Args[2], atoi(os.Args[3]), atoi(os.Args[4]), cool)
	case "snap":
		snap(ctx, os.Args[2])
	default:
		log.Fatalf("unknown command %q", os.Args[1])
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		log.Fatal(err)
	}
	return n
}

func drain(ctx context.Context, url string, n, w int, cooldown time.Duration) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	drv := riverpgxv5.New(pool)
	m, err := rivermigrate.New(drv, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		log.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(drv, &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: w}},
		Workers:       workers,
		FetchCooldown: cooldown,
		Logger:        nil,
	})
	if err != nil {
		log.Fatal(err)
	}
	params := make([]river.InsertManyParams, 0, 1000)
	for i := 0; i < n; i += len(params) {
		params = params[:0]
		for j := i; j < n && len(params) < cap(params); j++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			log.Fatal(err)
		}
	}
	before := takeSnap(ctx, url)
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1,
		Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	cpu0 := rusage()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	deadline := time.After(10 * time.Minute)
	for done := 0; done < n; {
		select {
		case <-events:
			done++
		case <-deadline:
			log.Fatalf("only %d of %d jobs done within 10 minutes", done, n)
		}
	}
	secs := time.Since(start).Seconds()
	cpu := rusage() - cpu0
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	pool.Close() // its backends exit and flush their statistics
	time.Sleep(300 * time.Millisecond)
	d := takeSnap(ctx, url).minus(before)
	fmt.Printf("jobs=%d workers=%d cooldown=%s secs=%.3f jobs_per_s=%.0f client_cpu_us_per_job=%.0f %s\n",
		n, w, cooldown, secs, float64(n)/secs, cpu.Seconds()*1e6/float64(n), d)
}

// rusage is this process's CPU time, user plus system.
func rusage() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// counters is one snapshot of the database's counters.
type counters struct{ cpuUS, commits, stmts, rows, wal int64 }

func (c counters) minus(o counters) counters {
	return counters{c.cpuUS - o.cpuUS, c.commits - o.commits, c.stmts - o.stmts, c.rows - o.rows, c.wal - o.wal}
}

func (c counters) String() string {
	return fmt.Sprintf("db_cpu_us=%d commits=%d statements=%d rows=%d wal=%d", c.cpuUS, c.commits, c.stmts, c.rows, c.wal)
}

func snap(ctx context.Context, url string) { fmt.Println(takeSnap(ctx, url)) }

func takeSnap(ctx context.Context, url string) counters {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	var dataDir string
	var c counters
	if err := conn.QueryRow(ctx, `SELECT current_setting('data_directory'), xact_commit, tup_inserted + tup_updated + tup_deleted,
		(pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&dataDir, &c.commits, &c.rows, &c.wal); err != nil {
		log.Fatal(err)
	}
	// pg_stat_statements, when the cluster preloads it (bench-pg does)
	// and the extension is created in the database.
	_ = conn.QueryRow(ctx, `SELECT COALESCE(SUM(calls), 0)::bigint FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE d.datname = current_database()`).Scan(&c.stmts)
	c.cpuUS = clusterCPU(dataDir).Microseconds()
	return c
}

// clusterCPU is the CPU time of the postmaster, its live children and
// (through the postmaster's cutime and cstime) its children that exited.
func clusterCPU(dataDir string) time.Duration {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		log.Fatal(err)
	}
	pm := strings.SplitN(string(b), "\n", 2)[0]
	ticks := statTicks(pm, true)
	kids, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, k := range kids {
		pid := filepath.Base(filepath.Dir(k))
		if pid != pm && ppid(k) == pm {
			ticks += statTicks(pid, false)
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// fields of /proc/PID/stat after the command name: state is [0], ppid [1],
// utime [11], stime [12], cutime [13], cstime [14].
func statFields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

func ppid(path string) string {
	f := statFields(path)
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

func statTicks(pid string, withChildren bool) int64 {
	f := statFields("/proc/" + pid + "/stat")
	if len(f) < 15 {
		return 0
	}
	var t int64
	last := 12
	if withChildren {
		last = 14
	}
	for i := 11; i <= last; i++ {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		t += n
	}
	return t
}
