package main

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/replay"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// helpFlags runs `<cmd> --help` and returns the flags its usage line names
// and those its flag list defines.
func helpFlags(t *testing.T, cmd string) (usage, defined []string) {
	t.Helper()
	code, _, errOut := runCLI(t, cmd, "--help")
	if code != 0 {
		t.Fatalf("%s --help: exit %d\n%s", cmd, code, errOut)
	}
	lines := strings.Split(errOut, "\n")
	if !strings.HasPrefix(lines[0], "usage: gym-otel-spank "+cmd) {
		t.Fatalf("%s --help starts %q", cmd, lines[0])
	}
	usage = uniq(regexp.MustCompile(`--([a-z][a-z-]*)`).FindAllStringSubmatch(lines[0], -1))
	for _, l := range lines[1:] {
		if m := regexp.MustCompile(`^  --([a-z][a-z-]*)`).FindStringSubmatch(l); m != nil {
			defined = append(defined, m[1])
		}
	}
	sort.Strings(defined)
	return usage, defined
}

func uniq(ms [][]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		if !seen[m[1]] {
			seen[m[1]] = true
			out = append(out, m[1])
		}
	}
	sort.Strings(out)
	return out
}

// TestManPageAndHelpAgree: for every command, the man page's SYNOPSIS line,
// the --help usage line and the flags the command defines name the same
// flags.
func TestManPageAndHelpAgree(t *testing.T) {
	man, err := os.ReadFile(filepath.Join(testenv.Root(), "docs", "man", "gym-otel-spank.1.md"))
	if err != nil {
		t.Fatal(err)
	}
	synopsis := map[string]string{}
	for _, l := range strings.Split(string(man), "\n") {
		if m := regexp.MustCompile(`^\*\*gym-otel-spank ([a-z]+)\*\*(.*)`).FindStringSubmatch(l); m != nil {
			synopsis[m[1]] = m[2]
		}
	}
	for name := range commands {
		usage, defined := helpFlags(t, name)
		line, ok := synopsis[name]
		if !ok {
			t.Errorf("docs/man/gym-otel-spank.1.md has no SYNOPSIS line for %s", name)
			continue
		}
		inMan := uniq(regexp.MustCompile(`\*\*--([a-z][a-z-]*)\*\*`).FindAllStringSubmatch(line, -1))
		if strings.Join(usage, " ") != strings.Join(defined, " ") || strings.Join(inMan, " ") != strings.Join(defined, " ") {
			t.Errorf("%s: flags defined %v, in --help's usage line %v, in the man page %v", name, defined, usage, inMan)
		}
	}
}

// TestFlagsAnywhere: flags after the directory, and "--" ending the flags.
func TestFlagsAnywhere(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "metrics.jsonl", `{"resourceMetrics":[]}`+"\n")
	code, out, errOut := runCLI(t, "inspect", dir, "--json")
	if code != 0 || !strings.HasPrefix(out, "{") {
		t.Errorf("inspect DIR --json: %d %q %s", code, out[:min(len(out), 80)], errOut)
	}
	if code, _, errOut = runCLI(t, "inspect", "--", "--json"); code != 1 || !strings.Contains(errOut, "--json") {
		t.Errorf("inspect -- --json: the argument after -- is a directory: %d %s", code, errOut)
	}
	if code, _, errOut = runCLI(t, "inspect", dir, dir); code != 2 || !strings.Contains(errOut, "give one directory (got 2 arguments") {
		t.Errorf("two directories: %d %s", code, errOut)
	}
	if code, _, errOut = runCLI(t, "validate", "--no-token-check", "extra"); code != 2 || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("validate extra: %d %s", code, errOut)
	}
	// directive: KEY=VALUE items before and after the flags.
	code, out, errOut = runCLI(t, "directive", "gym_logs=false", "--config", "/lustre/r1/submit.yaml", "--run-id", "r1", "scrape_interval_seconds=5")
	if code != 0 || out != "#SBATCH --gym-otel=config=/lustre/r1/submit.yaml,run_id=r1,gym_logs=false,scrape_interval_seconds=5\n" {
		t.Errorf("directive with items around the flags: %d %q %s", code, out, errOut)
	}
}

// TestDurationHint: a duration without a unit says what to write.
func TestDurationHint(t *testing.T) {
	code, _, errOut := runCLI(t, "replay", "--timeout", "5", t.TempDir())
	if code != 2 || !strings.Contains(errOut, `"5" is not a duration (a unit is needed: 5s for seconds, 5m for minutes)`) {
		t.Errorf("--timeout 5: %d %s", code, errOut)
	}
	// Said once, with where to look, not wrapped in the whole flag list.
	if n := strings.Count(errOut, "is not a duration"); n != 1 || strings.Contains(errOut, "usage:") || !strings.Contains(errOut, "replay --help lists its flags") {
		t.Errorf("--timeout 5: the error %d times, or with the usage around it:\n%s", n, errOut)
	}
	code, _, errOut = runCLI(t, "replay", "--progress", "soon", t.TempDir())
	if code != 2 || !strings.Contains(errOut, "a number with a unit: 500ms, 30s") {
		t.Errorf("--progress soon: %d %s", code, errOut)
	}
}

// TestVersion: this program's version, the Slurm it was built for (as the
// Makefile records it, else said unknown) and the real collector's
// version.
func TestVersion(t *testing.T) {
	col := testenv.Collector(t)
	code, out, errOut := runCLI(t, "--version", "--binary", col)
	if code != 0 || !strings.HasPrefix(out, "gym-otel-spank "+version) || !strings.Contains(out, "built for Slurm") ||
		!regexp.MustCompile(`(?m)^collector: otelcol-gym version \d+\.\d+\.\d+`).MatchString(out) {
		t.Errorf("--version: %d\n%s%s", code, out, errOut)
	}
	// A login node without the collector: what is known, and exit 0.
	none := filepath.Join(t.TempDir(), "none")
	code, out, _ = runCLI(t, "version", "--binary", none)
	if code != 0 || !strings.HasPrefix(out, "gym-otel-spank "+version) || !strings.Contains(out, "collector: not found ("+none+"; the nodes run it: install otelcol-gym there, or give --binary PATH)") {
		t.Errorf("version without a collector: %d %s", code, out)
	}
	if _, err := os.Stat(replay.DefaultBinary); err != nil {
		t.Setenv("PATH", t.TempDir())
		code, out, _ = runCLI(t, "--version")
		if code != 0 || !strings.Contains(out, "collector: not found (otelcol-gym;") {
			t.Errorf("--version without a collector on PATH: %d %s", code, out)
		}
	}
	// A collector that is there but does not answer is a failure.
	code, out, _ = runCLI(t, "version", "--binary", "/bin/false")
	if code != 1 || !strings.Contains(out, "collector: /bin/false --version failed") {
		t.Errorf("a collector that fails: %d %s", code, out)
	}
}

// TestInspectHTMLWrote: --html says on stderr where it wrote the page,
// with the flag after the directory.
func TestInspectHTMLWrote(t *testing.T) {
	if _, err := os.Stat("/usr/share/javascript/chart.js/chart.min.js"); err != nil {
		testenv.Missing(t, "Chart.js (Debian package libjs-chart.js)")
		return
	}
	dir := t.TempDir()
	writeFile(t, dir, "metrics.jsonl", `{"resourceMetrics":[]}`+"\n")
	page := filepath.Join(t.TempDir(), "r.html")
	code, _, errOut := runCLI(t, "inspect", dir, "--html", page)
	if code != 0 || errOut != "gym-otel: wrote "+page+"\n" {
		t.Errorf("inspect DIR --html FILE: %d %q", code, errOut)
	}
	if st, err := os.Stat(page); err != nil || st.Size() == 0 {
		t.Errorf("page: %v", err)
	}
}
