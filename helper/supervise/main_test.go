package supervise_test

import (
	"os"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
)

// TestMain builds the real CLI for the tests that start the supervisor.
func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
