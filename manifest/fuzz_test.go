package manifest_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/manifest"
)

// FuzzParse checks that Parse never panics, refuses only with config errors
// naming the file, and that a loaded manifest, encoded again, loads to the
// same value (its encoding writes every default out).
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		specExample,
		one(`{"handler":` + hook + `,"effect_contract":{"kind":"external_write","retry_mode":"reconcile"},"compensation":{"supported":false}}`),
		one(`{"handler":{"kind":"process","command":"h","args":["-x"],"cwd":"sub","persistent":{"max_calls":5}},"grants":["network","env"],` +
			`"secrets":{"A":{"credential":"a"},"B":{"file":"/etc/b"}},` + none + `}`),
		one(`{"handler":{"kind":"accounting_stub"},"timeout_ms":7,"max_payload_bytes":9,` + none + `}`),
		one(httpBinding),
		one(`{"handler":{"kind":"http","options":{"url":"http://h/a/{/x}?q={/y~1z}","method":"DELETE","body":null,"idempotency_header":"",` +
			`"headers":{"X-A":"1","Authorization":{"secret":"T"}}}},"secrets":{"T":{"env":"T"}},` + none + `}`),
		one(`{"handler":{"kind":"webhook","options":{"url":"https://h/x","allow_addresses":["::ffff:10.0.0.0/104"]},"credentials":{"hmac_secret":{"env":"K"}}},` + none + `}`),
		one(`{"handler":{"kind":"process"},"timeout_ms":1.5,"effect_contract":null}`),
		`{"manifest_version":"touba-manifest-v1","bindings":{"tool:a\u003cb":{}}} x`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := manifest.Parse("fuzz.json", data)
		if err != nil {
			var ce *manifest.ConfigError
			if !errors.As(err, &ce) || ce.File != "fuzz.json" || !strings.HasPrefix(ce.Path, "$") || ce.Rule == "" {
				t.Fatalf("error %#v is not a config error naming file, path and rule", err)
			}
			if got, want := touba.ErrorCode(err), touba.ECONFIG; got != want {
				t.Fatalf("ErrorCode=%q, want %q", got, want)
			}
			return
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		m2, err := manifest.Parse("fuzz.json", again)
		if err != nil {
			t.Fatalf("re-marshalled manifest %s does not load: %v", again, err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, m2)
		}
	})
}
