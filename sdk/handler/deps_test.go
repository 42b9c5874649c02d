package handler_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The SDK is linked into users' handlers: of the daemon it may import only
// the wire types of package protocol, which import nothing but the
// standard library.
func TestImportsOnlyProtocol(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{
		"github.com/touba/touba-trigger/sdk/handler": true,
		"github.com/touba/touba-trigger/protocol":    true,
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/touba/touba-trigger") && !allowed[pkg] {
			t.Errorf("sdk/handler depends on %s", pkg)
		}
		if strings.Contains(strings.Split(pkg, "/")[0], ".") && !strings.HasPrefix(pkg, "github.com/touba/touba-trigger") {
			t.Errorf("sdk/handler depends on the third-party package %s", pkg)
		}
	}
}
