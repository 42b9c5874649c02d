package postgres

import (
	"testing"

	"github.com/touba/touba-trigger/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
