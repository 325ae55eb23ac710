package plugin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// tokenNowhere checks, after every test of the package has run (TestMain),
// that the backend token is in no Slurm log (debug level), no file of the
// jobs dir and no record. A scan that read no log or no job file proves
// nothing and is an error too.
func tokenNowhere() error {
	var hits []string
	scanned := map[string]int{}
	scan := func(what, root string) {
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() || fi.Size() > 64<<20 {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			scanned[what]++
			if strings.Contains(string(data), backendToken) {
				hits = append(hits, p)
			}
			return nil
		})
	}
	scan("jobs", jobsDir)
	scan("records", recordDir)
	for _, f := range []string{"slurmctld.log", "slurmd-gn1.log", "slurmd-gn2.log"} {
		scan("logs", filepath.Join(stateDir, f))
	}
	scan("run", filepath.Join(stateDir, "run"))
	if len(hits) > 0 {
		return fmt.Errorf("the backend token is in %v", hits)
	}
	if scanned["logs"] < 3 || scanned["jobs"] == 0 {
		return fmt.Errorf("the token scan read %d logs and %d job files: nothing to prove", scanned["logs"], scanned["jobs"])
	}
	return nil
}
