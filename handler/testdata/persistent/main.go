// Command persistent is a persistent-mode protocol handler (SPEC §4.1) for
// the handler package's tests, on the standard library only. It serves one
// request per stdin line, each in its own goroutine; the request's input
// {"op": ...} picks what the call does, good or bad. Its one argument is a
// folder where it leaves marks the tests wait on: <call_id>.arrived when a
// request is read, exit-<pid> when stdin ended and every call was answered.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

type request struct {
	Input   json.RawMessage `json:"input"`
	Context struct {
		CallID string `json:"call_id"`
		Effect *struct {
			EffectID    string `json:"effect_id"`
			Fingerprint string `json:"fingerprint"`
		} `json:"effect"`
	} `json:"context"`
}

// input is what a test asks of one call.
type input struct {
	Op      string `json:"op"`
	N       int    `json:"n"`       // gate, reverse: how many calls; big: bytes
	HoldMS  int    `json:"hold_ms"` // gate: how long to stay in flight once open
	PIDFile string `json:"pid_file"`
}

var (
	dir   string
	outMu sync.Mutex

	mu        sync.Mutex
	cond      = sync.NewCond(&mu)
	inFlight  int
	maxFlight int
	group     []string // reverse: call ids in arrival order
	nextTurn  = -1     // reverse: index of the call that answers next
	answered  int      // reverse: answers given so far
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "grandchild" {
		grandchild(os.Args[2])
	}
	if len(os.Args) != 2 {
		fatal("usage: persistent DIR")
	}
	dir = os.Args[1]
	if os.Getenv("TOUBA_HANDLER_MODE") != "persistent" {
		fatal("not started in persistent mode")
	}
	var calls sync.WaitGroup
	br := bufio.NewReader(os.Stdin)
	for {
		line, err := br.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var req request
			if jerr := json.Unmarshal(line, &req); jerr != nil {
				fatal("request is not JSON: " + jerr.Error())
			}
			if strings.Contains(string(req.Input), `"stopread"`) {
				// Stop reading stdin for good: the host's writes then block.
				mark(req.Context.CallID+".arrived", strconv.Itoa(os.Getpid()))
				for { // not select {}: with nothing else running, that is a deadlock
					time.Sleep(time.Hour)
				}
			}
			calls.Add(1)
			go func() {
				defer calls.Done()
				handle(req)
			}()
		}
		if err != nil {
			break
		}
	}
	calls.Wait()
	mark(fmt.Sprintf("exit-%d", os.Getpid()), "eof")
}

func handle(req request) {
	var in input
	_ = json.Unmarshal(req.Input, &in)
	mu.Lock()
	inFlight++
	maxFlight = max(maxFlight, inFlight)
	cond.Broadcast()
	mu.Unlock()
	mark(req.Context.CallID+".arrived", strconv.Itoa(os.Getpid()))

	cwd, _ := os.Getwd()
	out := map[string]any{"pid": os.Getpid(), "mode": os.Getenv("TOUBA_HANDLER_MODE"), "cwd": cwd, "echo": req.Input}
	switch in.Op {
	case "echo":
	case "hang":
		select {}
	case "gate":
		// Open once n calls were in flight together, then stay a while so
		// more overlap.
		mu.Lock()
		for maxFlight < in.N {
			cond.Wait()
		}
		mu.Unlock()
		time.Sleep(time.Duration(in.HoldMS) * time.Millisecond)
	case "reverse":
		// The last of n calls to arrive answers first, the first last.
		mu.Lock()
		group = append(group, req.Context.CallID)
		me := len(group) - 1
		if len(group) == in.N {
			nextTurn = in.N - 1
			cond.Broadcast()
		}
		for nextTurn != me {
			cond.Wait()
		}
		out["arrival"], out["answer"] = me, answered
		answered++
		respondLocked(req, out)
		nextTurn--
		cond.Broadcast()
		mu.Unlock()
		return
	case "garbage":
		write("this is not json\n")
		select {}
	case "unknown":
		write(`{"call_id":"no-such-call","ok":true,"output":null}` + "\n")
		select {}
	case "twice":
		respond(req, out)
	case "env":
		out["env"] = os.Environ()
	case "big":
		out["big"] = strings.Repeat("x", in.N)
	case "stderr":
		fmt.Fprintf(os.Stderr, "boom token=%s\n", os.Getenv("API_TOKEN"))
	case "spawn":
		spawn(in.PIDFile)
		select {}
	case "exit":
		os.Exit(3)
	case "closeout":
		os.Stdout.Close()
		select {}
	default:
		fatal("unknown op " + in.Op)
	}
	respond(req, out)
}

// respond writes one ok response line with the request's call id and, for
// a call with an effect, an applied receipt. It reports the largest number
// of calls this process has had in flight at once.
func respond(req request, out map[string]any) {
	mu.Lock()
	defer mu.Unlock()
	respondLocked(req, out)
}

func respondLocked(req request, out map[string]any) {
	inFlight--
	out["max_in_flight"] = maxFlight
	resp := map[string]any{"call_id": req.Context.CallID, "ok": true, "output": out}
	if e := req.Context.Effect; e != nil {
		resp["effect_receipt"] = map[string]string{"effect_id": e.EffectID, "fingerprint": e.Fingerprint,
			"outcome": "applied", "receipt_ref": "ref:" + e.EffectID}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		fatal(err.Error())
	}
	write(string(b) + "\n")
}

func write(s string) {
	outMu.Lock()
	defer outMu.Unlock()
	if _, err := os.Stdout.WriteString(s); err != nil {
		fatal("write: " + err.Error())
	}
}

// mark writes dir/name atomically, so a test never sees it half written.
func mark(name, content string) {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
		fatal(err.Error())
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		fatal(err.Error())
	}
}

// spawn starts this program as a grandchild in the same process group and
// waits until it has written its pid file.
func spawn(pidFile string) {
	self, err := os.Executable()
	if err != nil {
		fatal(err.Error())
	}
	cmd := exec.Command(self, "grandchild", pidFile)
	if err := cmd.Start(); err != nil {
		fatal(err.Error())
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(pidFile); err == nil {
			return
		}
	}
	fatal("grandchild did not start")
}

func grandchild(pidFile string) {
	if err := os.WriteFile(pidFile+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		fatal(err.Error())
	}
	if err := os.Rename(pidFile+".tmp", pidFile); err != nil {
		fatal(err.Error())
	}
	select {}
}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "persistent fixture:", msg)
	os.Exit(2)
}
