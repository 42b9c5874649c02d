package main_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// TestConsoleLogsToAFileAndTraceExportFailures: the daemon with
// --log-format console writing to a file (as under a service manager that
// appends to one) writes no colour escapes; with a trace collector that
// refuses every batch it warns once, counts the spans, and "stopped" is
// still its last line.
func TestConsoleLogsToAFileAndTraceExportFailures(t *testing.T) {
	var posts atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Error(w, "refused", http.StatusBadRequest)
	}))
	defer collector.Close()

	f := writeFiles(t, e2eProgram, e2eManifest)
	logPath := filepath.Join(f.dir, "daemon.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	args := f.serveArgs("--log-format", "console")
	cmd := exec.Command(testkit.Binary(t), args...)
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="+collector.URL+"/v1/traces",
		"OTEL_BSP_SCHEDULE_DELAY=50", "NO_COLOR=")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	read := func() string { b, _ := os.ReadFile(logPath); return string(b) }

	addrRE := regexp.MustCompile(`listening.*addr=(127\.0\.0\.1:\d+)`)
	var addr string
	testkit.WaitFor(t, 30*time.Second, func() bool {
		m := addrRE.FindStringSubmatch(read())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, "the listening line in the log file")
	for i := 0; i < 5; i++ {
		if status, _ := testkit.Post(t, "http://"+addr+"/triggers/e2e/Orders", "", `{"n":1}`); status != 202 {
			t.Fatalf("POST: %d", status)
		}
		// Each batch is refused: wait for it, so there are several failures.
		want := int64(i + 1)
		testkit.WaitFor(t, 10*time.Second, func() bool { return posts.Load() >= want }, "a refused export")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, read())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", read())
	}

	log := read()
	if strings.Contains(log, "\x1b[") {
		t.Fatalf("colour escapes in a log file:\n%q", log)
	}
	if n := strings.Count(log, "trace export failed"); n != 1 {
		t.Fatalf("%d trace export warnings for %d refused batches within a minute, want 1:\n%s", n, posts.Load(), log)
	}
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "stopped") {
		t.Fatalf("last line %q, want stopped:\n%s", last, log)
	}
	if !strings.Contains(log, "endpoint="+collector.URL+"/v1/traces") {
		t.Fatalf("the endpoint is not logged at start:\n%s", log)
	}
}
