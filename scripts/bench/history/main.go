// Command history is the Go side of scripts/bench-history: a steady load
// on a running daemon for several --history windows, with the storage it
// reports at the end of each window and intake's latency while a
// --history pass runs and while none does.
//
//	history -url URL -socket SOCK -log DAEMONLOG -rate R -window W -windows N [-pid PID] [-database URL]
//
// It posts R new deliveries a second (unique event ids, 1 KiB bodies,
// from 16 senders) for N windows; at the end of each window it asks the
// daemon's admin socket for its storage report (the files or tables, as
// `touba-trigger storage` shows them). It then reads the passes from the
// daemon's log ("forgot what is past --history", its time and took) and
// splits the answers by whether their request overlapped a pass. With
// -pid, the bytes the daemon wrote to disk per delivery (/proc/PID/io);
// with -database, the WAL PostgreSQL wrote per delivery and the rows each
// delivery leaves in each table.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/scripts/bench/procio"
)

type sample struct {
	start time.Time
	took  time.Duration
	code  int
}

func main() {
	url := flag.String("url", "", "the trigger's URL")
	socket := flag.String("socket", "", "the daemon's admin socket")
	logPath := flag.String("log", "", "the daemon's log (JSON lines)")
	rate := flag.Int("rate", 500, "deliveries a second")
	window := flag.Duration("window", 20*time.Second, "the daemon's --history")
	windows := flag.Int("windows", 5, "how many windows to run")
	pid := flag.Int("pid", 0, "the daemon's pid, for the bytes it writes")
	database := flag.String("database", "", "the daemon's PostgreSQL database, for the WAL and rows per delivery")
	flag.Parse()
	var db *pgx.Conn
	if *database != "" {
		var err error
		if db, err = pgx.Connect(context.Background(), *database); err != nil {
			log.Fatal(err)
		}
	}
	written0, wal0 := procio.WriteBytes(*pid), walLSN(db)
	client, err := admin.Dial(*socket)
	if err != nil {
		log.Fatal(err)
	}
	body := `{"data":"` + strings.Repeat("x", 1013) + `"}`
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var mu sync.Mutex
	var samples []sample
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const senders = 16
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second * senders / time.Duration(*rate))
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				req, _ := http.NewRequest(http.MethodPost, *url, strings.NewReader(body))
				req.Header.Set("X-Touba-Event-Id", fmt.Sprintf("h%d-%d-%d", os.Getpid(), s, i))
				start := time.Now()
				resp, err := hc.Do(req)
				code := 0
				if err == nil {
					code = resp.StatusCode
					resp.Body.Close()
				}
				mu.Lock()
				samples = append(samples, sample{start, time.Since(start), code})
				mu.Unlock()
			}
		}()
	}
	begin := time.Now()
	var sizes []int64
	for w := 1; w <= *windows; w++ {
		time.Sleep(time.Until(begin.Add(time.Duration(w) * *window)))
		rep, err := client.Storage(context.Background(), admin.StorageRequest{})
		if err != nil {
			log.Fatal(err)
		}
		var total int64
		var parts []string
		for _, s := range rep.Sizes {
			total += s.Bytes
			parts = append(parts, fmt.Sprintf("%s %.1f MiB", s.Name, float64(s.Bytes)/(1<<20)))
		}
		sizes = append(sizes, total)
		fmt.Printf("window %d: storage %.1f MiB (%s)\n", w, float64(total)/(1<<20), strings.Join(parts, ", "))
	}
	close(stop)
	wg.Wait()
	n := float64(len(samples))
	if *pid > 0 {
		fmt.Printf("RESULT the daemon wrote %.0f bytes to disk per delivery\n", float64(procio.WriteBytes(*pid)-written0)/n)
	}
	if db != nil {
		fmt.Printf("RESULT PostgreSQL wrote %.0f bytes of WAL per delivery\n", float64(walLSN(db)-wal0)/n)
		var entries float64
		db.QueryRow(context.Background(), `SELECT count(*) FROM touba.entries`).Scan(&entries)
		var per []string
		for _, t := range []string{"runs", "run_steps", "effects", "effect_events"} {
			var c float64
			db.QueryRow(context.Background(), `SELECT count(*) FROM touba.`+t).Scan(&c)
			per = append(per, fmt.Sprintf("%s %.2f", t, c/entries))
		}
		fmt.Printf("RESULT rows per entry: %s (%0.f entries in the window)\n", strings.Join(per, ", "), entries)
	}
	if len(sizes) >= 4 {
		fmt.Printf("RESULT growth from window 2 to window 4: %+.1f%%\n", 100*float64(sizes[3]-sizes[1])/float64(sizes[1]))
	}
	passes := readPasses(*logPath)
	var during, outside []time.Duration
	failed := 0
	for _, s := range samples {
		if s.code != http.StatusAccepted {
			failed++
		}
		if overlaps(s, passes) {
			during = append(during, s.took)
		} else {
			outside = append(outside, s.took)
		}
	}
	fmt.Printf("RESULT %d deliveries (%d not 202), %d passes; intake p50/p99 outside passes %s / %s (%d), during passes %s / %s (%d)\n",
		len(samples), failed, len(passes), pct(outside, 50), pct(outside, 99), len(outside), pct(during, 50), pct(during, 99), len(during))
}

// walLSN is the database's WAL position in bytes (0 without one).
func walLSN(db *pgx.Conn) int64 {
	n, err := procio.WALBytes(db)
	if err != nil {
		log.Fatal(err)
	}
	return n
}

// readPasses reads the intervals of the passes the daemon logged.
func readPasses(path string) [][2]time.Time {
	f, err := os.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	var out [][2]time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Message string  `json:"message"`
			Time    string  `json:"time"`
			Took    float64 `json:"took"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Message != "forgot what is past --history" {
			continue
		}
		end, err := time.Parse("2006-01-02T15:04:05.000Z07:00", l.Time)
		if err != nil {
			continue
		}
		// The line is logged when the pass ended; time has milliseconds.
		out = append(out, [2]time.Time{end.Add(-time.Duration(l.Took * float64(time.Millisecond))), end.Add(time.Millisecond)})
	}
	return out
}

func overlaps(s sample, passes [][2]time.Time) bool {
	end := s.start.Add(s.took)
	for _, p := range passes {
		if s.start.Before(p[1]) && end.After(p[0]) {
			return true
		}
	}
	return false
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, k int) bool { return d[i] < d[k] })
	return d[min(len(d)-1, len(d)*p/100)].Round(10 * time.Microsecond)
}
