package contract

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestREADMEPackageMap: the README's table of parts names every Go
// package under helper/ (and every top-level part), so that a newcomer's
// "where is X?" is answered there; a new package that is not in the map
// fails here.
func TestREADMEPackageMap(t *testing.T) {
	root := testenv.Root()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(readme), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.SplitN(line, "|", 3)[1]
		for _, f := range strings.Split(cell, ",") {
			rows[strings.Trim(strings.TrimSpace(f), "`/")] = true
		}
	}
	ents, err := os.ReadDir(filepath.Join(root, "helper"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"spank", "include", "cmd/gym-otel-spank", "collector", "tests"}
	for _, e := range ents {
		if e.IsDir() {
			want = append(want, "helper/"+e.Name())
		}
	}
	for _, p := range want {
		if !rows[p] {
			t.Errorf("README.md's table of parts has no row for %s", p)
		}
	}
}
