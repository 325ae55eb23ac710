package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryCommandFindsTheSite: with $SLURM_CONF naming a cluster whose
// plugstack line names the site file and an inline item, validate,
// render, directive and replay find the same site settings, and each says
// so in the same checked: line. render's preview equals the one rendered
// from the same layers given by hand (the node's file, see
// TestRenderIsTheNodesFile), inline item included.
func TestEveryCommandFindsTheSite(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OTEL_TOKEN", "s3cret-value")
	t.Setenv("SLURM_CLUSTER_NAME", "")
	site := writeFile(t, dir, "site.yaml", siteYAML+"  token_env: SITE_TOKEN\n")
	conf, line := writePlugstack(t, dir, "site="+site+" scrape_interval_seconds=7")
	t.Setenv("SLURM_CONF", conf)
	t.Setenv("SITE_TOKEN", "s3cret-value")
	gym := writeFile(t, dir, "submit.yaml", "driver: {gym_install: /g}\n")
	from := "site file " + site + " and inline items scrape_interval_seconds=7 from the plugstack line " + line + ":2 (included from " +
		filepath.Join(dir, "plugstack.conf") + ":1), PlugStackConfig of " + conf
	checked := "gym-otel: checked: " + from + "; Gym config " + gym + "; a bare --gym-otel\n"

	code, out, errOut := runCLI(t, "validate", "--config", gym)
	if code != 0 || !strings.HasSuffix(out, checked) {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errOut)
	}

	code, out, errOut = runCLI(t, "render", "--config", gym, "--job-id", "42")
	if code != 0 || errOut != checked {
		t.Fatalf("render: exit %d, stderr %q, want the line %q", code, errOut, checked)
	}
	// The inline item; the site file's token_env is not in it: with the
	// default delivery from the files the collector has no backend
	// exporter and reads no backend token.
	if !strings.Contains(out, "scrape_interval: 7s") || strings.Contains(out, "SITE_TOKEN") {
		t.Errorf("render did not use the plugstack line's settings, or references the backend token under delivery from the files:\n%s", out)
	}
	code, byHand, errOut := runCLI(t, "render", "--site", site, "--site-item", "scrape_interval_seconds=7", "--config", gym, "--job-id", "42")
	if code != 0 || byHand != out {
		t.Errorf("render from the plugstack line differs from render of the same layers given by hand (exit %d %s)", code, errOut)
	}

	code, out, errOut = runCLI(t, "directive", "--config", gym, "--run-id", "r1")
	wantDirective := "gym-otel: checked: " + from + "; --gym-otel=config=" + gym + ",run_id=r1\n"
	if code != 0 || out != "#SBATCH --gym-otel=config="+gym+",run_id=r1\n" || errOut != wantDirective {
		t.Errorf("directive: exit %d\n%s%s\nwant on stderr %q", code, out, errOut, wantDirective)
	}
	// With the site's settings the whole job is checked, as the submit
	// checks it: a bad value of an item is refused.
	code, _, errOut = runCLI(t, "directive", "--config", gym, "endpoint=ftp://x")
	if code != 1 || !strings.Contains(errOut, `otel.endpoint: "ftp://x"`) || !strings.Contains(errOut, "checked: "+from) {
		t.Errorf("directive with a port clash: exit %d\n%s", code, errOut)
	}

	// replay takes the endpoint and the token's variable from the same
	// site file: without SITE_TOKEN it names that variable.
	job := filepath.Join(dir, "job")
	writeJob(t, job)
	os.Unsetenv("SITE_TOKEN")
	code, out, errOut = runCLI(t, "replay", job)
	if code != 1 || !strings.Contains(errOut, "the variable SITE_TOKEN is not set") || !strings.Contains(out, "gym-otel: checked: "+from+"\n") {
		t.Errorf("replay: exit %d\n%s%s", code, out, errOut)
	}
}

// writeJob writes a job dir with a collector.yaml and one span.
func writeJob(t *testing.T, job string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(job, "otel"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, job, "otel/collector.yaml", "exporters:\n  otlp_http/backend:\n    endpoint: https://old.example.com\n    timeout: 10s\n")
	writeFile(t, job, "otel/traces.jsonl", `{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"s","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}`+"\n")
}

// TestReplayEndpointWithoutScheme: a scheme-less --endpoint is a usage
// error (exit 2) naming the flag and the value, before any file is read.
func TestReplayEndpointWithoutScheme(t *testing.T) {
	job := filepath.Join(t.TempDir(), "job")
	writeJob(t, job)
	code, _, errOut := runCLI(t, "replay", "--endpoint", "127.0.0.1:4318", "--token-env", "T", job)
	if code != 2 || !strings.Contains(errOut, `gym-otel-spank replay: --endpoint "127.0.0.1:4318": no scheme`) {
		t.Errorf("exit %d:\n%s", code, errOut)
	}
}
