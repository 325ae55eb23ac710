package inspect

import (
	"compress/gzip"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateSlurmRuns = flag.Bool("update-slurm-runs", false, "rewrite the golden files of testdata/slurmrun")

// slurmRun unpacks testdata/slurmrun/<name>/otel (the job's otel/ dir as
// the plugin's collectors wrote it on real Slurm, its jsonl files gzipped)
// into a temporary job dir and builds its report; the temporary otel/ dir
// is returned for the goldens to hide.
func slurmRun(t *testing.T, name string) (*Report, string) {
	t.Helper()
	src := filepath.Join("testdata", "slurmrun", name, "otel")
	job := t.TempDir()
	otel := filepath.Join(job, "otel")
	err := filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(otel, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		var r io.Reader = in
		if strings.HasSuffix(path, ".gz") {
			zr, err := gzip.NewReader(in)
			if err != nil {
				return err
			}
			r, to = zr, strings.TrimSuffix(to, ".gz")
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, 0o644)
	})
	if err != nil {
		t.Fatalf("%v (testdata/slurmrun/README.md says how it was made)", err)
	}
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	return r, otel
}

// textSections keeps the sections of a text report whose title starts
// with one of heads.
func textSections(text string, heads ...string) string {
	var b strings.Builder
	keep := false
	for _, l := range strings.SplitAfter(text, "\n") {
		if strings.HasPrefix(l, "== ") {
			keep = false
			for _, h := range heads {
				keep = keep || strings.HasPrefix(l, "== "+h)
			}
		}
		if keep {
			b.WriteString(l)
		}
	}
	return b.String()
}

// slurmRunGolden compares the phase, first-rollout and cgroup sections of
// the report (text and JSON) with testdata/slurmrun/<name>/golden.{txt,json}.
func slurmRunGolden(t *testing.T, name string, r *Report, otel string) {
	t.Helper()
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(text.String(), "\n") {
		if len([]rune(l)) > Width {
			t.Errorf("line over %d columns: %q", Width, l)
		}
	}
	js, err := json.MarshalIndent(struct {
		Phases       []NodePhases  `json:"phases"`
		FirstRollout FirstRollout  `json:"first_rollout"`
		Cgroups      []CgroupUsage `json:"cgroups"`
	}{r.Phases, r.FirstRollout, r.Cgroups}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	shown := "/jobs/" + name + "/otel"
	for file, got := range map[string]string{
		"golden.txt":  textSections(text.String(), "Slurm phases", "submit to first rollout", "cgroups"),
		"golden.json": string(js) + "\n",
	} {
		got = strings.ReplaceAll(got, otel, shown)
		path := filepath.Join("testdata", "slurmrun", name, file)
		if *updateSlurmRuns {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -run %s -update-slurm-runs writes it)", err, t.Name())
		}
		if string(want) != got {
			t.Errorf("%s differs (go test -update-slurm-runs rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
		}
	}
}
