// Package dist_test checks what is shipped beside the binary (SPEC §7, §9):
// the Prometheus rules and the Grafana dashboard against a real daemon's
// /metrics, the release script (reproducible archives and a Debian package
// that installs and removes cleanly), the container image, and the compose
// topology (two nodes on PostgreSQL behind HAProxy) run without
// containers. Each test skips, saying why, when its tool is missing;
// .ci/run installs them all.
package dist_test

import (
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
)

func TestMain(m *testing.M) { gobuild.Main(pgtest.M(m), nil) }
