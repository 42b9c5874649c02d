package manifest_test

import (
	"strings"
	"testing"

	"github.com/touba/touba-trigger/manifest"
)

// TestParse_BadURLIsNotEchoed: a refused webhook URL is named by its JSON
// path only. Its path, query and user info may be the credential (a Slack
// incoming webhook), and a refusal goes to the terminal, the log and CI
// output.
func TestParse_BadURLIsNotEchoed(t *testing.T) {
	for _, u := range []string{
		`ftp://hooks.test/services/SECRETPATH?token=SECRETQUERY`,
		`https://SECRETUSER:SECRETPW@hooks.test/services/SECRETPATH?token=SECRETQUERY`,
		`https:///services/SECRETPATH?token=SECRETQUERY`,
		`/services/SECRETPATH?token=SECRETQUERY`,
		`https://hooks.test/services/SECRETPATH?token=SECRETQUERY\u0000`,
		`https://hooks.test/services/SECRETPATH%zz?token=SECRETQUERY`,
		`https://hooks.test:99999999/services/SECRETPATH?token=SECRETQUERY`,
		`https://hooks.test/services/SECRETPATH?token=SECRETQUERY\q`, // not even JSON
	} {
		src := one(`{"handler":{"kind":"webhook","options":{"url":"` + u + `"},"credentials":{"hmac_secret":{"env":"K"}}},"effect_contract":{"kind":"none"}}`)
		_, err := manifest.Parse("m.json", []byte(src))
		if err == nil {
			t.Errorf("url %s: accepted", u)
			continue
		}
		for _, s := range []string{"SECRET", "services"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("url %s: the refusal quotes %q:\n%v", u, s, err)
			}
		}
		if !strings.Contains(err.Error(), "m.json") {
			t.Errorf("url %s: the refusal names no file: %v", u, err)
		}
	}
}
