package docs_test

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// getting-started.md's "A first real program" runs the Stripe example as
// written: every environment variable the example's program and manifest
// read a secret from is exported in the section, and every loopback API an
// http binding calls is started there (a node script of the example's
// folder that listens on that port), so `serve` neither refuses start-up
// on an unresolved secret nor fails the step on a connection refused.
func TestFirstRealProgramRunsAsWritten(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root(), "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	start := strings.Index(section, "## A first real program")
	if start < 0 {
		t.Fatal(`getting-started.md has no "## A first real program"`)
	}
	section = section[start+3:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	dir := filepath.Join(root(), "examples", "stripe")
	var envs []string
	for _, name := range []string{"program.air.json", "touba.manifest.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`\{\s*"env"\s*:\s*"([A-Z0-9_]+)"\s*\}`).FindAllStringSubmatch(string(b), -1) {
			envs = append(envs, m[1])
		}
	}
	if len(envs) == 0 {
		t.Fatal("the example reads no secret from the environment: the test reads the wrong files")
	}
	for _, name := range envs {
		if !regexp.MustCompile(`(?m)^export ` + name + `=`).MatchString(section) {
			t.Errorf("the section does not export %s, which the example reads: serve refuses to start without it", name)
		}
	}

	var man struct {
		Bindings map[string]struct {
			Handler struct {
				Kind    string `json:"kind"`
				Options struct {
					URL string `json:"url"`
				} `json:"options"`
			} `json:"handler"`
		} `json:"bindings"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "touba.manifest.json"))
	if err != nil || json.Unmarshal(b, &man) != nil {
		t.Fatalf("read the manifest: %v", err)
	}
	started := regexp.MustCompile(`(?m)^node (\S+\.mjs)`).FindAllStringSubmatch(section, -1)
	for ref, bd := range man.Bindings {
		if bd.Handler.Kind != "http" {
			continue
		}
		u, err := url.Parse(strings.NewReplacer("{", "", "}", "").Replace(bd.Handler.Options.URL))
		if err != nil || u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost" {
			continue
		}
		served := false
		for _, m := range started {
			script, err := os.ReadFile(filepath.Join(dir, m[1]))
			served = served || err == nil && strings.Contains(string(script), u.Port())
		}
		if !served {
			t.Errorf("binding %s calls %s, and the section starts nothing that listens on port %s", ref, bd.Handler.Options.URL, u.Port())
		}
	}
}
