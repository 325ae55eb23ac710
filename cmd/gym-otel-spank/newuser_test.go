package main

import (
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
