package workers_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// swhVersion is the npm standardwebhooks package the test verifies with.
const swhVersion = "1.3.0"

// verifyScript verifies the request in the environment with the npm
// package (its Webhook.verify throws on a bad signature) and prints ok.
const verifyScript = `
const { Webhook } = require(process.env.SWH_DIR + "/node_modules/standardwebhooks");
const headers = JSON.parse(process.env.SWH_HEADERS);
new Webhook(process.env.SWH_SECRET).verify(process.env.SWH_BODY, headers);
console.log("ok");
`

// TestListenStandardWebhooksNpm: the request listen forwards verifies
// with the npm standardwebhooks library under the secret listen prints,
// and a body changed by one byte does not. The package is installed into
// a temporary directory; without node or the npm registry the test is
// skipped, saying which.
func TestListenStandardWebhooksNpm(t *testing.T) {
	if testing.Short() {
		t.Skip("installs an npm package")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed")
	}
	dir := t.TempDir()
	install := exec.Command(npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", dir, "standardwebhooks@"+swhVersion)
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("the npm registry is unreachable (npm install standardwebhooks@%s: %v): %s", swhVersion, err, out)
	}

	w := newWorld(t, sqliteBackend, touba.RetryIdempotencyKey, 1500)
	w.start("--workers", "4")
	lap := newLaptop(t)
	w.send(orders, "o-1")
	startListen(t, w, lap, lap.srv.URL+"/webhooks")
	testkit.WaitFor(t, 30*time.Second, func() bool { return len(lap.received()) == 1 }, "o-1 to arrive")
	lap.mu.Lock()
	body, header, secret := string(lap.lastBody), lap.lastHeader, lap.secret
	lap.mu.Unlock()
	headers := map[string]string{}
	for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		headers[k] = header.Get(k)
	}
	hj, _ := json.Marshal(headers)
	run := func(body string) (string, error) {
		cmd := exec.Command("node", "-e", verifyScript)
		cmd.Env = append(os.Environ(), "SWH_DIR="+filepath.Clean(dir), "SWH_HEADERS="+string(hj), "SWH_SECRET="+secret, "SWH_BODY="+body)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(body); err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("standardwebhooks refused the forwarded request: %v\n%s\nheaders %s\nbody %s", err, out, hj, body)
	}
	if out, err := run(body + " "); err == nil {
		t.Fatalf("standardwebhooks accepted a changed body: %s", out)
	}
}
