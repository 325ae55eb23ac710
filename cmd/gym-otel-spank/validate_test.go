package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateEveryErrorAtOnce: a site file, a Gym config and a SPEC with
// a mistake of every kind: one run reports every one, each with where it
// is (file:line, or the --gym-otel item), a suggestion where a known name is
// close, and the layers it read.
func TestValidateEveryErrorAtOnce(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OTEL_TOKEN", "s3cret-value")
	site := writeFile(t, dir, "site.yaml", "otel:\n  endpoint: otlp.example.com:4318\n  service_nme: svc\n  gpu_metrics_port: 70000\n")
	gym := writeFile(t, dir, "submit.yaml", "driver: {gym_install: /g}\nservices:\n  policy:\n    type: vLLM\n  judge:\n    type: vllm\n    port: \"8001\"\n")
	code, out, errOut := runCLI(t, "validate", "--site", site, "--config", gym, "--spec", "benchmrk=gsm8k,scrape_interval_seconds=0")
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{
		site + `:3: otel.service_nme: unknown key (did you mean "service_name"?)`,
		site + ":4: otel.gpu_metrics_port:",
		gym + ":7: services.judge.port:",
		`benchmrk=gsm8k: unknown item (did you mean "benchmark"?)`,
		"otel.scrape_interval_seconds=0:",
		// Validate's own checks, in the same run, with where the value was set.
		site + `:2: otel.endpoint: "otlp.example.com:4318"`,
		`services.policy: type "vLLM" is not one this plugin knows (vllm, vllm_pd, ray), so it is not scraped (did you mean "vllm"?)`,
		"gym-otel: checked: site file " + site + " (--site); Gym config " + gym + "; --gym-otel=benchmrk=gsm8k,scrape_interval_seconds=0",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("lacks %q:\n%s", want, errOut)
		}
	}
	// The misspelt service_name is one mistake: no "service_name: not set" too.
	if strings.Contains(errOut, "otel.service_name: not set") {
		t.Errorf("the misspelt key reported twice:\n%s", errOut)
	}
}

// writePlugstack writes slurm.conf naming a plugstack.conf that includes
// plugstack.conf.d/*.conf, whose second line is the plugin's with args.
func writePlugstack(t *testing.T, dir, args string) (slurmConf, line string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "plugstack.conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	ps := writeFile(t, dir, "plugstack.conf", "include "+filepath.Join(dir, "plugstack.conf.d", "*.conf")+"\n")
	writeFile(t, dir, "plugstack.conf.d/other.conf", "optional /usr/lib/slurm/other.so x=1\n")
	line = writeFile(t, dir, "plugstack.conf.d/gym-otel.conf", "# gym-otel-spank\nrequired /usr/lib/x86_64-linux-gnu/slurm-wlm/gym_otel.so "+args+" # site\n")
	slurmConf = writeFile(t, dir, "slurm.conf", "ClusterName=c\nPlugStackConfig="+ps+"\n")
	return slurmConf, line
}

// TestValidateReadsPlugstack: without --site, validate reads the site
// file and inline items of the plugin's plugstack line as sbatch does
// (slurm.conf's PlugStackConfig, its include), and says so.
func TestValidateReadsPlugstack(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OTEL_TOKEN", "s3cret-value")
	site := writeFile(t, dir, "site.yaml", siteYAML)
	conf, line := writePlugstack(t, dir, "site="+site+" on_failure=fail cli=/usr/bin/gym-otel-spank")
	t.Setenv("SLURM_CONF", conf)
	code, out, errOut := runCLI(t, "validate")
	want := "gym-otel: checked: site file " + site + " and inline items on_failure=fail from the plugstack line " + line + ":2 (included from " +
		filepath.Join(dir, "plugstack.conf") + ":1), PlugStackConfig of " + conf + "; a bare --gym-otel\n"
	if code != 0 || !strings.HasPrefix(out, "gym-otel: valid: endpoint https://otlp.example.com") || !strings.HasSuffix(out, want) {
		t.Errorf("exit %d\n%s%s\nwant the line %q", code, out, errOut, want)
	}
	// Without the plugstack's site file the config is not valid: it is read.
	t.Setenv("SLURM_CONF", filepath.Join(dir, "none.conf"))
	code, out, errOut = runCLI(t, "validate")
	if code != 1 || !strings.Contains(errOut, "otel.endpoint: not set") || !strings.Contains(errOut, "no site settings (no "+filepath.Join(dir, "none.conf")) {
		t.Errorf("without slurm.conf: exit %d\n%s%s", code, out, errOut)
	}
	// --plugstack FILE, with a mistyped argument: its file:line and a
	// suggestion, with the config's other errors.
	_, line = writePlugstack(t, dir, "site="+site+" prolog_timout=30 on_failure=maybe")
	code, _, errOut = runCLI(t, "validate", "--plugstack", filepath.Join(dir, "plugstack.conf"))
	for _, w := range []string{
		line + `:2: plugstack.conf argument "prolog_timout=30": unknown argument (did you mean "prolog_timeout"?)`,
		line + ":2: plugstack.conf: otel.on_failure=maybe:",
	} {
		if code != 1 || !strings.Contains(errOut, w) {
			t.Errorf("exit %d, lacks %q:\n%s", code, w, errOut)
		}
	}
	// A plugstack without the plugin: sbatch would not know --gym-otel.
	writeFile(t, dir, "bare.conf", "optional /usr/lib/slurm/other.so\n")
	code, _, errOut = runCLI(t, "validate", "--plugstack", filepath.Join(dir, "bare.conf"))
	if code != 1 || !strings.Contains(errOut, "bare.conf: no gym_otel.so line") {
		t.Errorf("no plugin line: exit %d %s", code, errOut)
	}
}

// TestValidateWhereSpecSets: a key the SPEC sets beside a bad item is
// attributed to the SPEC, not to the site file that the SPEC overrides.
func TestValidateWhereSpecSets(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OTEL_TOKEN", "s3cret-value")
	site := writeFile(t, dir, "site.yaml", siteYAML)
	code, _, errOut := runCLI(t, "validate", "--site", site, "--spec", "scrape_intervall_seconds=3,endpoint=ftp://x")
	if code != 1 || !strings.Contains(errOut, `gym-otel: --gym-otel: otel.endpoint: "ftp://x": expected an http:// or https:// URL`) {
		t.Errorf("exit %d:\n%s", code, errOut)
	}
}

// TestValidateGymNearMissKey: scrape_intervall_seconds in a Gym config's
// otel: block is an error (the job would otherwise run at the default
// 15 s), named with its value and the key meant, exit 1 and no valid:
// line; a key far from every known one stays a warning, and the valid:
// line counts the warnings.
func TestValidateGymNearMissKey(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OTEL_TOKEN", "s3cret-value")
	site := writeFile(t, dir, "site.yaml", siteYAML)
	gym := writeFile(t, dir, "submit.yaml", "driver: {gym_install: /g}\notel:\n  scrape_intervall_seconds: 10\n")
	code, out, errOut := runCLI(t, "validate", "--site", site, "--config", gym)
	want := gym + `:3: otel.scrape_intervall_seconds: 10: unknown key, one letter from otel.scrape_interval_seconds (did you mean "scrape_interval_seconds"?)`
	if code != 1 || strings.Contains(out, "valid") || !strings.Contains(errOut, want) {
		t.Errorf("exit %d\n%s%s\nwant %s", code, out, errOut, want)
	}
	later := writeFile(t, dir, "later.yaml", "driver: {gym_install: /g}\notel:\n  local_node_metrics: null\n  exemplars: true\n")
	code, out, errOut = runCLI(t, "validate", "--site", site, "--config", later)
	// local_node_metrics is a key of Gym's published executor, read;
	// exemplars is no key of it, ignored with a warning.
	if code != 0 || !strings.HasPrefix(out, "gym-otel: valid with 1 warning (above): endpoint https://otlp.example.com") ||
		strings.Count(errOut, "gym-otel: warning: ") != 1 {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
}

// TestValidateListComma: a comma inside gym_span_groups is refused with
// the hint to join with +.
func TestValidateListComma(t *testing.T) {
	site := writeFile(t, t.TempDir(), "site.yaml", siteYAML)
	code, _, errOut := runCLI(t, "validate", "--no-token-check", "--site", site, "--spec", "gym_span_groups=default,verify")
	if code != 1 || !strings.Contains(errOut, "gym-otel: --gym-otel: verify: expected key=value (the values of a list item are joined with +, not with a comma: gym_span_groups=default+verify)") {
		t.Errorf("exit %d:\n%s", code, errOut)
	}
}

// TestValidateUnreadableSiteOneError: a site file that cannot be read (not
// there, a directory) is one error: the keys only it would set are not
// reported "not set" on top of it.
func TestValidateUnreadableSiteOneError(t *testing.T) {
	t.Setenv("OTEL_TOKEN", "s3cret-value")
	dir := t.TempDir()
	for _, site := range []string{filepath.Join(dir, "missing.yaml"), dir} {
		code, out, errOut := runCLI(t, "validate", "--site", site)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if code != 1 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "gym-otel: reading "+site+": ") ||
			!strings.HasPrefix(lines[1], "gym-otel: checked: site file "+site) {
			t.Errorf("%s: exit %d:\n%s", site, code, errOut)
		}
	}
}

// TestValidateUnreadableGymConfigOneError: a Gym config that is not there
// or is not YAML is one error (the YAML one at the file's line), as an
// unreadable site file is: without a site file, the otel.endpoint and
// otel.service_name it would set are not reported "not set" on top of
// it, nor the default token variable's absence (it may name another).
func TestValidateUnreadableGymConfigOneError(t *testing.T) {
	t.Setenv("OTEL_TOKEN", "")
	dir := t.TempDir()
	t.Setenv("SLURM_CONF", filepath.Join(dir, "none.conf")) // no site settings
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("policy_model:\n  name: x\notel:\n  endpoint: https://otel.example:4318\n  targets: [a, b\n  service_name: gym\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ cfg, first string }{
		{filepath.Join(dir, "missing.yaml"), "gym-otel: reading " + filepath.Join(dir, "missing.yaml") + ": "},
		{bad, "gym-otel: " + bad + ":5: not valid YAML: "},
	} {
		code, out, errOut := runCLI(t, "validate", "--spec", "config="+c.cfg)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if code != 1 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], c.first) || !strings.HasPrefix(lines[1], "gym-otel: checked: ") {
			t.Errorf("%s: exit %d:\n%s", c.cfg, code, errOut)
		}
	}
}
