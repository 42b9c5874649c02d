// Command isobench measures the round trip of one process-handler call
// (the handler package's fixture in echo mode: a small Go program) with
// and without the network grant, the way the daemon makes them: after
// making itself non-dumpable as serve does. Run by scripts/bench-isolation,
// as root and as an unprivileged user, to show what network isolation adds
// per call on each path.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/protocol"
)

func main() {
	fixture := flag.String("fixture", "", "the handler fixture program (handler/testdata/fixture)")
	n := flag.Int("n", 200, "calls per case")
	flag.Parse()
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fail(err)
	}
	method, err := handler.IsolationMethod()
	if err != nil {
		method = "none: " + err.Error()
	}
	fmt.Printf("uid %d, isolation: %s\n", os.Getuid(), method)
	for _, c := range []struct {
		name   string
		grants []string
	}{{"network grant", []string{handler.GrantNetwork}}, {"isolated", nil}} {
		r, err := handler.NewProcess(handler.ProcessSpec{Command: *fixture, Args: []string{"echo"}, Dir: os.TempDir(),
			Grants: c.grants, Timeout: 10 * time.Second})
		if err != nil {
			fail(err)
		}
		req := &handler.Request{Protocol: protocol.Name, Operation: protocol.Invoke, ToolRef: "tool:bench/Echo",
			Input: json.RawMessage(`{"order_id":42}`), Context: handler.Context{CallID: "c", Attempt: 1, Grants: c.grants}}
		var d []time.Duration
		for i := 0; i < *n+5; i++ {
			start := time.Now()
			res := r.Call(context.Background(), req, func() error { return nil })
			if !res.OK {
				fail(fmt.Errorf("%s: %+v %v", c.name, res, res.Err))
			}
			if i >= 5 { // the first calls warm the page cache
				d = append(d, time.Since(start))
			}
		}
		slices.Sort(d)
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		fmt.Printf("  %-14s mean %6.2f ms  p50 %6.2f ms  p90 %6.2f ms  (%d calls)\n", c.name,
			ms(sum/time.Duration(len(d))), ms(d[len(d)/2]), ms(d[len(d)*9/10]), len(d))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "isobench:", err)
	os.Exit(1)
}
