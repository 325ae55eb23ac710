package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidatePlugstackItemOnce: a bad inline item on the plugin's
// plugstack line is one mistake, reported once, with the line's file:line
// (it used to come a second time without it, from the site layers'
// resolve), beside the other layers' errors.
func TestValidatePlugstackItemOnce(t *testing.T) {
	dir := t.TempDir()
	site := writeFile(t, dir, "site.yaml", siteYAML)
	_, line := writePlugstack(t, dir, "site="+site+" scrape_interval_seconds=abc")
	code, out, errOut := runCLI(t, "validate", "--plugstack", filepath.Join(dir, "plugstack.conf"), "--spec", "run_id=r1,on_failure=maybe")
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q\n%s", code, out, errOut)
	}
	item := `otel.scrape_interval_seconds=abc: expected whole number 1..3600, got "abc"`
	if n := strings.Count(errOut, item); n != 1 || !strings.Contains(errOut, line+":2: plugstack.conf: "+item) {
		t.Errorf("the bad inline item said %d times, want once with %s:2:\n%s", n, line, errOut)
	}
	if !strings.Contains(errOut, "otel.on_failure=maybe") {
		t.Errorf("the SPEC's error is missing:\n%s", errOut)
	}
}

// TestValidatePlugstackMissing: a --plugstack file that is not there is
// named with the flag; so is slurm.conf's PlugStackConfig.
func TestValidatePlugstackMissing(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.conf")
	code, _, errOut := runCLI(t, "validate", "--plugstack", missing)
	if code != 1 || !strings.Contains(errOut, "gym-otel: --plugstack: open "+missing+": no such file or directory") {
		t.Errorf("exit %d:\n%s", code, errOut)
	}
	conf := writeFile(t, dir, "slurm.conf", "ClusterName=c\nPlugStackConfig="+missing+"\n")
	t.Setenv("SLURM_CONF", conf)
	code, _, errOut = runCLI(t, "validate")
	if code != 1 || !strings.Contains(errOut, "gym-otel: PlugStackConfig of "+conf+": open "+missing+": no such file or directory") {
		t.Errorf("exit %d:\n%s", code, errOut)
	}
}

// TestInspectNoConfigAbsence: in files without a collector.yaml (a
// backend's, the demo's second inspect), a missing section is "nothing
// there", with why: no config says what was scraped.
func TestInspectNoConfigAbsence(t *testing.T) {
	code, out, errOut := runCLI(t, "inspect", "../../helper/inspect/testdata/otel", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r struct {
		Absent []struct{ Section, Why, Detail string } `json:"absent"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, a := range r.Absent {
		if a.Section == "model servers" || a.Section == "GPUs" || a.Section == "hosts" {
			n++
			if a.Why != "nothing there" || !strings.HasSuffix(a.Detail, "metric in the files, and no collector.yaml to say what was scraped") {
				t.Errorf("%s: %q (%s)", a.Section, a.Why, a.Detail)
			}
		}
	}
	if n != 3 {
		t.Errorf("absent %+v", r.Absent)
	}
}

// TestInspectQuantilesTheMeanAllows: the long job the real collector
// wrote (helper/inspect/testdata/longjob): Gym's verify duration histogram
// has nearly every observation in its (100, 250] ms bucket, where
// interpolation made a p50 of 175.5 ms; a mean of 110.1 ms and a min of
// 100 ms allow at most 120.2. Every quantile of the report is within what
// its mean, min and max allow.
func TestInspectQuantilesTheMeanAllows(t *testing.T) {
	src := "../../helper/inspect/testdata/longjob/otel"
	dir := filepath.Join(t.TempDir(), "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		name := e.Name()
		if strings.HasSuffix(name, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if data, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
			name = strings.TrimSuffix(name, ".gz")
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runCLI(t, "inspect", dir, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// Every set of quantiles in the report (an object with p50, mean and
	// min) is held within what its mean and min allow: at most half the
	// observations can be below min, so p50 <= 2*mean - min.
	var doc any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	checked := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			p50, ok1 := v["p50"].(float64)
			mean, ok2 := v["mean"].(float64)
			min, ok3 := v["min"].(float64)
			if ok1 && ok2 && ok3 {
				checked++
				if most := 2*mean - min; p50 > most*(1+1e-9)+1e-6 {
					t.Errorf("%s: p50 %v, above the %v a mean of %v and a min of %v allow", path, p50, most, mean, min)
				}
			}
			for k, c := range v {
				walk(path+"."+k, c)
			}
		case []any:
			for i, c := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		}
	}
	walk("", doc)
	if checked < 3 {
		t.Fatalf("only %d sets of quantiles in the long job's report", checked)
	}
}
