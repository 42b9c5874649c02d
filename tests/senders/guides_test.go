package senders_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// block is a fenced code block of a guide: its info string and its text.
type block struct{ info, text string }

// fencedBlocks returns a Markdown file's fenced (```) code blocks.
func fencedBlocks(md string) []block {
	var out []block
	var cur *block
	for _, line := range strings.Split(md, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(t, "```"):
			cur = &block{info: strings.TrimSpace(strings.TrimPrefix(t, "```"))}
		case cur != nil && t == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	return out
}

var (
	exportLine = regexp.MustCompile(`(?m)^export ([A-Z_][A-Z0-9_]*)=(\S+)$`)
	// answerLine is an answer as a guide shows it: # {json}  (HTTP n).
	answerLine = regexp.MustCompile(`(?m)^# (\{.*\}  \(HTTP \d{3}\))$`)
)

// answerPattern turns a guide's answer line into a pattern: "…" stands
// for any id.
func answerPattern(line string) *regexp.Regexp {
	return regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(line), "…", `[^"]*`) + "$")
}

// TestSenderGuides runs the "Test it locally" part of each guide in
// docs/senders as a reader would: its "json program" and "json manifest"
// blocks are the daemon's files, its exports the daemon's environment, and
// its "sh send" blocks run, in order, in one bash with the daemon's
// address for localhost:8080. Between two blocks the test waits until the
// daemon has run every entry, as the guide says the reader does. Every
// answer printed must match the "# {...}  (HTTP n)" line the guide shows
// under its command, in order.
func TestSenderGuides(t *testing.T) {
	for _, tool := range []string{"bash", "openssl", "curl", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the guides' recipes need %s: %v", tool, err)
		}
	}
	var guides []string
	all, _ := filepath.Glob(filepath.Join(moduleRoot(), "docs", "senders", "*.md"))
	for _, g := range all {
		if filepath.Base(g) != "README.md" { // the index
			guides = append(guides, g)
		}
	}
	if len(guides) < 5 {
		t.Fatalf("%d guides in docs/senders, want one per sender (5)", len(guides))
	}
	for _, g := range guides {
		t.Run(strings.TrimSuffix(filepath.Base(g), ".md"), func(t *testing.T) { runGuide(t, g) })
	}
}

func runGuide(t *testing.T, path string) {
	md, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	var sends []string
	for _, b := range fencedBlocks(string(md)) {
		switch b.info {
		case "json program", "json manifest":
			files[b.info] = b.text
		case "sh send":
			sends = append(sends, b.text)
		}
	}
	if files["json program"] == "" || files["json manifest"] == "" || len(sends) == 0 {
		t.Fatalf("%s: want a `json program`, a `json manifest` and `sh send` blocks", path)
	}
	dir := t.TempDir()
	program, manifest := filepath.Join(dir, "program.air.json"), filepath.Join(dir, "local.manifest.json")
	os.WriteFile(program, []byte(files["json program"]), 0o644)
	os.WriteFile(manifest, []byte(files["json manifest"]), 0o644)
	for _, m := range exportLine.FindAllStringSubmatch(strings.Join(sends, "\n"), -1) {
		t.Setenv(m[1], m[2]) // the daemon resolves {"env": NAME} at start
	}
	d := testkit.StartServer(t, server.Config{Program: program, Manifest: manifest,
		Queue: filepath.Join(dir, "q.sqlite"), State: filepath.Join(dir, "s.sqlite"), Journal: filepath.Join(dir, "j.sqlite"),
		AdminSocket: filepath.Join(dir, "admin.sock"), MetricsListen: "127.0.0.1:0", Workers: 2})

	// One bash for every block, so later blocks see earlier variables; at
	// each "@@wait" it reads a line from fd 3, written once the daemon ran
	// every entry.
	script := "set -euo pipefail\n" + strings.Join(sends, "echo @@wait >&2; read -r _ <&3\n")
	script = strings.ReplaceAll(script, "localhost:8080", d.Addr().String())
	resume, resumeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer resumeW.Close()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.ExtraFiles = []*os.File{resume}
	stderr, _ := cmd.StderrPipe()
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	resume.Close()
	var errLog strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if sc.Text() != "@@wait" {
			errLog.WriteString(sc.Text() + "\n")
			continue
		}
		testkit.WaitFor(t, 30*time.Second, func() bool { return idle(t, d.MetricsURL()) }, "the daemon to run every entry")
		io.WriteString(resumeW, "go\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the guide's blocks failed: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errLog.String())
	}

	// curl's -w puts "  (HTTP n)" on the line after the answer's own newline.
	got := strings.Split(strings.TrimSpace(strings.ReplaceAll(out.String(), "\n  (HTTP ", "  (HTTP ")), "\n")
	want := answerLine.FindAllStringSubmatch(strings.Join(sends, ""), -1)
	if len(got) != len(want) {
		t.Fatalf("%d answers printed, the guide shows %d:\n%s", len(got), len(want), out.String())
	}
	for i, w := range want {
		if !answerPattern(w[1]).MatchString(got[i]) {
			t.Errorf("answer %d:\n got %s\nwant %s", i+1, got[i], w[1])
		}
	}
}

// idle reports whether the daemon has no pending or running entry.
func idle(t *testing.T, metricsURL string) bool {
	t.Helper()
	_, s := testkit.Get(t, metricsURL+"/metrics")
	return strings.Contains(s, `touba_queue_entries{status="pending"} 0`+"\n") &&
		strings.Contains(s, `touba_queue_entries{status="running"} 0`+"\n")
}
