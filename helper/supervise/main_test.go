package supervise_test

import (
	"os"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
)

// TestMain builds the real CLI for the tests that start the supervisor;
// a child run of this binary (TestControlInheritedChild) needs none.
func TestMain(m *testing.M) {
	if os.Getenv("GOS_HOLD_CHILD") != "" {
		os.Exit(m.Run())
	}
	os.Exit(harness.Main(m))
}
