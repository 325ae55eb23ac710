package plugin_test

// Containment that cannot be lost or bypassed, on real Slurm: many short
// jobs started and ended at once on one node (every collector in its
// group), a forged spec with out-of-range values (refused by name), a
// memory bound lowered below what the group holds (enforced, never
// ignored), and a process moved out of the plugin's group into the job's
// own step cgroup (killed at the job's end).

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// recorderBinary writes an otel.binary that saves its own /proc/<pid>/cgroup
// into the output dir (proc-cgroup) and then execs the real collector, so
// the file is the collector's place when it started.
func recorderBinary(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "recorder-collector")
	body := fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %[1]s --version ;; esac
cat /proc/$$/cgroup > "$(dirname "$2")/proc-cgroup"
exec %[1]s "$@"
`, testenv.Collector(t))
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// nodeHierarchies are the writable cgroup hierarchies of this host (the
// test nodes share it).
func nodeHierarchies(t *testing.T) []cgroup.Hierarchy {
	t.Helper()
	hs, err := cgroup.Discover("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if hs = cgroup.Writable(hs); len(hs) == 0 {
		testenv.Missing(t, "a writable cgroup hierarchy")
	}
	return hs
}

// inGroup reports which hierarchies of hs the /proc/<pid>/cgroup text
// procCgroup does not place in rel ("" when all do).
func notInGroup(hs []cgroup.Hierarchy, procCgroup, rel string) string {
	var miss []string
	for _, h := range hs {
		var re *regexp.Regexp
		if h.Version == cgroup.V2 {
			re = regexp.MustCompile(`(?m)^0::/` + regexp.QuoteMeta(rel) + `$`)
		} else {
			re = regexp.MustCompile(`(?m)^\d+:([^:]*,)?` + regexp.QuoteMeta(h.Controllers[0]) + `(,[^:]*)?:/` + regexp.QuoteMeta(rel) + `$`)
		}
		if !re.MatchString(procCgroup) {
			miss = append(miss, h.Mount)
		}
	}
	return strings.Join(miss, " ")
}

// waitJobsGone waits until none of ids is in the queue.
func waitJobsGone(t *testing.T, within time.Duration, ids []string) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(500 * time.Millisecond) {
		out, _ := run("squeue", "-h", "-o", "%i", "-j", strings.Join(ids, ","))
		if strings.TrimSpace(out) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs still queued or running after %v: %s", within, strings.Join(strings.Fields(out), " "))
		}
	}
}

// TestManyShortJobsContained: 16 short --gym-otel jobs submitted at once
// to one node with 8 CPUs: two waves, the first wave's epilogs removing
// their groups while the second wave's prologs create theirs. Every
// collector must start, and start inside its own group on every
// hierarchy; nothing may be left.
func TestManyShortJobsContained(t *testing.T) {
	waitIdle(t)
	hs := nodeHierarchies(t)
	d := markerDir(t, "many")
	bin := recorderBinary(t, d)
	script := writeScript(t, filepath.Base(d)+".sh", "true\n")
	const jobs = 16
	r := asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf(
		`for i in $(seq %d); do sbatch -w gn1 -n1 --gym-otel=binary=%s,job_dir=%s/run-%%j -o %s/%%j.out %s || exit 1; done`,
		jobs, bin, d, d, script))
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	ids := regexp.MustCompile(`Submitted batch job (\d+)`).FindAllStringSubmatch(r.stdout, -1)
	if len(ids) != jobs {
		t.Fatalf("%d jobs submitted: %s", len(ids), r.stdout)
	}
	var idList []string
	for _, m := range ids {
		idList = append(idList, m[1])
	}
	waitJobsGone(t, 180*time.Second, idList)
	waitNoCollector(t)
	waitIdle(t)
	log := slurmdLogs(t)
	contained, outside, missing := 0, 0, 0
	for _, id := range idList {
		rel := "gym_otel/" + clusterName() + "/gn1/job_" + id
		pc, err := os.ReadFile(filepath.Join(d, "run-"+id, "otel", "proc-cgroup"))
		if err != nil {
			missing++
			t.Errorf("job %s: the collector never started: %v", id, err)
			continue
		}
		if miss := notInGroup(hs, string(pc), rel); miss != "" {
			outside++
			t.Errorf("job %s: the collector started outside its group %s in %s:\n%s", id, rel, miss, pc)
		} else {
			contained++
		}
		if !regexp.MustCompile(`job ` + id + `: collector ready on gn1 \(.*, cgroup ` + regexp.QuoteMeta(rel) + `\)`).MatchString(log) {
			t.Errorf("job %s: no ready line naming its cgroup in slurmd's log", id)
		}
		if strings.Contains(log, "job "+id+": no cgroup for the collector") {
			t.Errorf("job %s: ran without a cgroup", id)
		}
		for _, h := range hs {
			if _, err := os.Stat(filepath.Join(h.Mount, rel)); err == nil {
				t.Errorf("job %s: its group is left in %s", id, h.Mount)
			}
		}
	}
	retried := regexp.MustCompile(`job (\d+): the collector's cgroup \S+ was made at attempt`).FindAllString(log, -1)
	t.Logf("%d short jobs at once on gn1: %d collectors in their group on all %d hierarchies, %d outside, %d never started; %d creates retried",
		jobs, contained, len(hs), outside, missing, len(retried))
}

// TestForgedValuesRefused: a spec set by hand through libslurm (no plugin
// at submit) with a memory_limit_mib of 0, and one so large that its
// bound would overflow, never starts a collector without a bound: each
// node's prolog refuses the value by name and the job runs without one.
func TestForgedValuesRefused(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "forgedvalues")
	bin := recorderBinary(t, d)
	forge := buildForge(t, d)
	for _, c := range []struct {
		mib  int
		want string
	}{
		{0, "otel.memory_limit_mib: 0 is out of range 32..65536"},
		{1 << 50, "otel.memory_limit_mib: 1125899906842624 is out of range 32..65536"},
	} {
		forged := &config.Resolved{Version: config.SpecVersion, Otel: config.Defaults(), JobDir: fmt.Sprintf("%s/run-%d", d, c.mib)}
		forged.Otel.Endpoint, forged.Otel.ServiceName, forged.Otel.Binary = "http://127.0.0.1:"+backendPort, "forged", bin
		forged.Otel.GPUMetricsPort, forged.Otel.NodeMetricsPort = 0, 0
		forged.Otel.MemoryLimitMiB = c.mib
		enc, err := forged.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out := fmt.Sprintf("%s/forged-%d.out", d, c.mib)
		r := asUser(t, 30*time.Second, nil, fmt.Sprintf("%s %s %s %s gn1", forge, enc, d, out))
		if r.code != 0 {
			t.Fatalf("forge: exit %d: %s %s", r.code, r.stdout, r.stderr)
		}
		id := jobIDOf(t, r)
		waitJobsGone(t, 60*time.Second, []string{id})
		waitFile(t, 10*time.Second, out)
		log := slurmdLogs(t)
		if !regexp.MustCompile(`job ` + id + `: .*` + regexp.QuoteMeta(c.want)).MatchString(log) {
			t.Errorf("memory_limit_mib=%d: the prolog did not refuse it by name (%q) in slurmd's log", c.mib, c.want)
		}
		if strings.Contains(log, "job "+id+": collector ready") {
			t.Errorf("memory_limit_mib=%d: a collector started", c.mib)
		}
		if _, err := os.Stat(filepath.Join(forged.JobDir, "otel", "proc-cgroup")); err == nil {
			t.Errorf("memory_limit_mib=%d: the forged binary ran", c.mib)
		}
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "job "+id+":") {
				t.Logf("slurmd: %s", line)
			}
		}
	}
	waitNoCollector(t)
	waitIdle(t)
}
