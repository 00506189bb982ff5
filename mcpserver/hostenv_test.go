package mcpserver_test

import (
	"testing"

	"github.com/deskfarm/deskfarm/internal/farmtest"
)

// TestMain fails any test whose client takes its server or token from this
// host instead of from the test (farmtest.Main).
func TestMain(m *testing.M) { farmtest.Main(m) }
