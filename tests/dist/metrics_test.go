package dist_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// serveArgs are serve's arguments for the quickstart example in dir, with
// every listener on a free loopback port.
func serveArgs(dir, program, manifest string, extra ...string) []string {
	args := []string{"serve", program, "--manifest", manifest,
		"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--admin-socket", filepath.Join(dir, "admin.sock"), "--log-level", "info"}
	return append(args, extra...)
}

// scrape runs a daemon with args, sends it one delivery, waits until the
// stub handler was called (so the counters of calls and latency exist)
// and returns its /metrics.
func scrape(t *testing.T, args []string) string {
	t.Helper()
	d := testkit.Start(t, nil, args...)
	maddr := metricsAddr(t, d)
	if code, _ := testkit.Post(t, d.URL()+"/triggers/examples.billing/Invoice", "inv-metrics", `{"amount": 10}`); code != 202 {
		t.Fatalf("post: status %d, want 202", code)
	}
	var body string
	testkit.WaitFor(t, 30*time.Second, func() bool {
		_, body = testkit.Get(t, "http://"+maddr+"/metrics")
		return strings.Contains(body, "touba_handler_calls_total{") && strings.Contains(body, "touba_ready")
	}, "the handler call to show on /metrics")
	return body
}

// sampleNames returns the names of the samples in a Prometheus text scrape
// (histograms as their _bucket, _sum and _count series).
func sampleNames(scrape string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(scrape, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// metricNames returns the touba metric names (touba_...) and recorded
// names (touba:...) an expression refers to; label values, in quotes, are
// not names.
func metricNames(expr string) []string {
	var out []string
	for _, id := range identifier.FindAllString(quoted.ReplaceAllString(expr, `""`), -1) {
		if strings.HasPrefix(id, "touba_") || strings.HasPrefix(id, "touba:") {
			out = append(out, id)
		}
	}
	return out
}

// ruleExprs returns the expressions of a rules file ("expr: ..." inline or
// as a "|" block) and the names it records.
func ruleExprs(t *testing.T, path string) (exprs, records []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	indent := func(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }
	for i := 0; i < len(lines); i++ {
		l := strings.TrimPrefix(strings.TrimSpace(lines[i]), "- ")
		if v, ok := strings.CutPrefix(l, "record:"); ok {
			records = append(records, strings.TrimSpace(v))
		}
		v, ok := strings.CutPrefix(l, "expr:")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if v == "|" || v == ">" || v == "|-" || v == ">-" {
			var block []string
			for j := i + 1; j < len(lines) && (strings.TrimSpace(lines[j]) == "" || indent(lines[j]) > indent(lines[i])); j++ {
				block = append(block, lines[j])
				i = j
			}
			v = strings.Join(block, "\n")
		}
		exprs = append(exprs, v)
	}
	if len(exprs) == 0 {
		t.Fatalf("%s: no expressions found", path)
	}
	return exprs, records
}

// dashboardExprs returns every query of the Grafana dashboard: the panels'
// target expressions and the template variables' queries.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "definition") {
					out = append(out, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return out
}

// Every metric the alert rules, the recording rules and the dashboard
// query is one a real daemon exports (a renamed metric would silently
// turn an alert off and a panel blank); every recorded name they use is
// recorded; every touba metric the daemon exports is on the dashboard.
// The scrape comes from a daemon on SQLite and, with PostgreSQL 15
// present, one on --database (touba_database_up exists only there); a
// delivery is sent first so that the counters of calls exist.
func TestRulesAndDashboardUseExportedMetrics(t *testing.T) {
	dir, program, manifest := quickstart(t)
	withCircuits(t, manifest) // so that the circuits' series exist
	withGathering(t, program) // and the gatherings'
	scrapes := []string{scrape(t, serveArgs(dir, program, manifest,
		"--queue", filepath.Join(dir, "q.sqlite"), "--state", filepath.Join(dir, "s.sqlite"),
		"--effect-journal", filepath.Join(dir, "j.sqlite")))}
	if ok, why := pgtest.Available(); ok {
		pdir, pprog, pman := quickstart(t)
		withCircuits(t, pman)
		withGathering(t, pprog)
		scrapes = append(scrapes, scrape(t, serveArgs(pdir, pprog, pman, "--database", pgtest.New(t), "--node-id", "metrics-1")))
	} else {
		t.Logf("no PostgreSQL (%s): touba_database_up is not checked", why)
	}
	exported := map[string]bool{}
	for _, s := range scrapes {
		for n := range sampleNames(s) {
			exported[n] = true
		}
	}
	if len(scrapes) == 2 && !exported["touba_database_up"] {
		t.Fatal("the --database daemon exports no touba_database_up")
	}

	prom := filepath.Join(root(), "deploy", "prometheus")
	recorded := map[string]bool{}
	sources := map[string][]string{}
	for _, f := range []string{"rules.yml", "alerts.yml"} {
		exprs, records := ruleExprs(t, filepath.Join(prom, f))
		for _, r := range records {
			recorded[r] = true
		}
		sources["deploy/prometheus/"+f] = exprs
	}
	sources["deploy/grafana/touba-trigger.json"] = dashboardExprs(t, filepath.Join(root(), "deploy", "grafana", "touba-trigger.json"))

	// Metrics the dashboard shows that this tree may not export yet: each
	// with the change that exports it. Missing ones are logged, not failed;
	// once exported they are checked like the rest.
	pending := map[string]string{}
	onDashboard := map[string]bool{}
	var missing []string
	for src, exprs := range sources {
		for _, e := range exprs {
			for _, n := range metricNames(e) {
				if strings.HasSuffix(src, ".json") {
					onDashboard[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
				}
				if strings.HasPrefix(n, "touba:") {
					if !recorded[n] {
						missing = append(missing, fmt.Sprintf("%s: %s is not recorded by rules.yml", src, n))
					}
				} else if !exported[n] {
					if why, ok := pending[n]; ok {
						t.Logf("%s: %s is not exported by this tree yet (%s)", src, n, why)
						continue
					}
					missing = append(missing, fmt.Sprintf("%s: %s is not exported by the daemon", src, n))
				}
			}
		}
	}
	for n := range exported {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(n, "touba_") && !onDashboard[base] && !onDashboard[n] {
			missing = append(missing, fmt.Sprintf("deploy/grafana/touba-trigger.json: exported %s is on no panel", n))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("%d problems:\n%s", len(missing), strings.Join(missing, "\n"))
	}
	t.Logf("%d series names exported; %d rule and %d dashboard expressions checked", len(exported),
		len(sources["deploy/prometheus/rules.yml"])+len(sources["deploy/prometheus/alerts.yml"]), len(sources["deploy/grafana/touba-trigger.json"]))

	// promtool's linter on the real scrape.
	if promtool, err := exec.LookPath("promtool"); err == nil {
		for i, s := range scrapes {
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = strings.NewReader(s)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool check metrics (scrape %d): %v\n%s", i, err, out)
			}
		}
	} else {
		t.Log("promtool is not installed (apt-get install prometheus): the scrape is not linted")
	}
}

// The rules' own unit tests, when promtool is present (.ci/run runs them
// as well, so they are not skipped in CI).
func TestPromtoolRules(t *testing.T) {
	promtool := need(t, "promtool", "prometheus")
	prom := filepath.Join(root(), "deploy", "prometheus")
	run(t, prom, nil, promtool, "check", "rules", "rules.yml", "alerts.yml")
	tests, _ := filepath.Glob(filepath.Join(prom, "tests", "*.yml"))
	run(t, prom, nil, promtool, append([]string{"test", "rules"}, tests...)...)
}

// editJSON rewrites the JSON file at path through edit.
func editJSON(t *testing.T, path string, edit func(doc map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc)
	if b, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// withGathering gives the program's first trigger a batch (SPEC §2.1), so
// that the gatherings' series exist.
func withGathering(t *testing.T, path string) {
	editJSON(t, path, func(p map[string]any) {
		p["triggers"].([]any)[0].(map[string]any)["batch"] = map[string]any{"max_size": 10, "window_ms": 1000}
	})
}

// withCircuits gives every binding of the manifest at path a circuit
// (SPEC §2.2), so a daemon on it exports the circuits' gauges; and adds a
// worker binding no delivery calls, so that the touba_worker_ series (by
// binding, at zero) exist too (SPEC §4.3), with the program's step that
// uses it (a binding no step uses is refused at load).
func withCircuits(t *testing.T, path string) {
	dir := filepath.Dir(path)
	token := filepath.Join(dir, "worker-token")
	if err := os.WriteFile(token, []byte("metrics-worker-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	editJSON(t, path, func(m map[string]any) {
		bindings := m["bindings"].(map[string]any)
		for _, v := range bindings {
			v.(map[string]any)["circuit"] = map[string]any{"failure_ratio": 0.5, "min_calls": 20, "window_ms": 60000, "open_ms": 30000}
		}
		bindings["tool:metrics/Worker"] = map[string]any{"handler": map[string]any{"kind": "worker", "token": map[string]any{"file": token}},
			"grants": []any{}, "timeout_ms": 10000,
			"effect_contract": map[string]any{"kind": "external_write", "retry_mode": "idempotency_key"}}
	})
	editJSON(t, filepath.Join(dir, "program.air.json"), func(p map[string]any) {
		triggers := p["triggers"].([]any)
		tr := map[string]any{}
		for k, v := range triggers[0].(map[string]any) {
			tr[k] = v // shallow: only ref and steps are replaced
		}
		tr["ref"] = "trigger:metrics/Worker"
		tr["steps"] = []any{map[string]any{"id": "w", "tool": "tool:metrics/Worker", "input": map[string]any{"$ref": "/event/body"}}}
		p["triggers"] = append(triggers, tr)
	})
}
