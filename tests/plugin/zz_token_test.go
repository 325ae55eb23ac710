package plugin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// This file's name sorts last, so its test runs after every job of the
// other files.

// The backend token is in no Slurm log (debug level), no job
// dir file and no record.
func TestZZTokenNowhere(t *testing.T) {
	var hits []string
	scan := func(root string) {
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() || fi.Size() > 64<<20 {
				return nil
			}
			data, err := os.ReadFile(p)
			if err == nil && strings.Contains(string(data), backendToken) {
				hits = append(hits, p)
			}
			return nil
		})
	}
	scan(jobsDir)
	scan(recordDir)
	for _, f := range []string{"slurmctld.log", "slurmd-gn1.log", "slurmd-gn2.log"} {
		scan(filepath.Join(stateDir, f))
	}
	scan(filepath.Join(stateDir, "run"))
	if len(hits) > 0 {
		t.Errorf("the backend token is in %v", hits)
	}
}
