package supervise

import (
	"os"
	"path/filepath"
	"testing"
)

// CopyTestBinary copies the running test binary into dir (a directory
// another user can read) and returns the copy's path: tests run one of
// their own functions in it as that user (-test.run=^TestXChild$), an
// attacker or a neighbour, with real credentials.
func CopyTestBinary(t testing.TB, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(dir, "supervise.test")
	if err := os.WriteFile(cp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return cp
}
