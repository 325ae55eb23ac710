package contract

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestHeaderCurrent fails while include/gym_otel_contract.h is not what
// the Go constants generate.
func TestHeaderCurrent(t *testing.T) {
	got, err := os.ReadFile(filepath.Join(testenv.Root(), "include", "gym_otel_contract.h"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != Header() {
		t.Fatalf("include/gym_otel_contract.h is stale: run `go generate ./helper/contract`\nwant:\n%s", Header())
	}
}
