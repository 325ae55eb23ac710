// Package slurmdocker runs gym-otel-spank on a real multi-node Slurm in
// containers (tests/slurm-docker: ctl, c1, c2 and an OTLP backend; Slurm
// 22.05 on Debian bookworm, 24.11 on trixie, 26.05 on sid), with jobs submitted as
// the unprivileged gymuser from the controller.
//
// The cluster is brought up first (up.sh SUITE alloc); the suite reads the
// exports up.sh keeps in the work dir. Runs only with
// GYM_OTEL_DOCKER_TESTS=1 (`make docker-test` brings each suite up, runs
// this and tears it down); GOS_SUITE picks the suite (default bookworm).
// With GYM_OTEL_REQUIRE_REAL=1 a missing cluster fails instead of skipping.
//
// Go rather than bash: the assertions read OTLP-JSON (types, resources,
// attributes) and compare times and ports across nodes.
package slurmdocker

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

const jobUser = "gymuser" // uid/gid 2000 in every container (image.sh)
const jobUID = 2000

// cluster is what up.sh printed (and kept in <work>/env).
type cluster struct {
	suite, project, work, net, image, slurmVersion string
	variant                                        string
	portFilter                                     string // GOS_PORT_FILTER: "on" or "off" (up.sh)
	token                                          string // the backend's bearer token
	kit                                            *slurmkit.Cluster
}

var (
	cl       *cluster
	setupErr error
	here     = filepath.Join(testenv.Root(), "tests", "slurm-docker")
)

func TestMain(m *testing.M) {
	if os.Getenv("GYM_OTEL_DOCKER_TESTS") != "1" {
		fmt.Println("tests/slurm-docker: skipped (runs with GYM_OTEL_DOCKER_TESTS=1 on a cluster up.sh brought up: make docker-test)")
		os.Exit(0)
	}
	cl, setupErr = load()
	os.Exit(m.Run())
}

// need returns the cluster, or skips (fails with GYM_OTEL_REQUIRE_REAL=1)
// when none is up.
func need(t *testing.T) *cluster {
	t.Helper()
	if setupErr != nil {
		testenv.Missing(t, "the docker cluster ("+setupErr.Error()+"; run tests/slurm-docker/up.sh)")
	}
	return cl
}

func load() (*cluster, error) {
	suite := os.Getenv("GOS_SUITE")
	if suite == "" {
		suite = "bookworm"
	}
	base := os.Getenv("GYM_OTEL_DOCKER_WORK")
	if base == "" {
		base = "/var/tmp/gym-otel-docker"
	}
	data, err := os.ReadFile(filepath.Join(base, suite, "env"))
	if err != nil {
		return nil, fmt.Errorf("no %s cluster up: %v", suite, err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		for _, kv := range strings.Fields(strings.TrimPrefix(line, "export ")) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	c := &cluster{suite: env["GOS_SUITE"], project: env["GOS_PROJECT"], work: env["GOS_WORK"], net: env["GOS_NET"],
		image: env["GOS_IMAGE"], slurmVersion: env["GOS_SLURM_VERSION"], variant: env["GOS_VARIANT"],
		portFilter: env["GOS_PORT_FILTER"]}
	if c.project == "" || c.work == "" {
		return nil, fmt.Errorf("%s/%s/env: no GOS_PROJECT/GOS_WORK", base, suite)
	}
	if c.portFilter != "on" && c.portFilter != "off" {
		return nil, fmt.Errorf("%s/%s/env: GOS_PORT_FILTER=%q, want on or off (an up.sh of this release)", base, suite, c.portFilter)
	}
	sec, err := os.ReadFile(filepath.Join(c.work, "secret", "backend.env"))
	if err != nil {
		return nil, err
	}
	c.token = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(sec)), "BACKEND_TOKEN="))
	c.kit = &slurmkit.Cluster{Runner: slurmkit.Docker{Project: c.project}, Login: "ctl", Nodes: []string{"c1", "c2"},
		User: jobUser, SlurmdLog: func(n string) string { return filepath.Join(c.work, "log", n, "slurmd.log") }}
	if out, err := c.on("ctl", "scontrol", "ping"); err != nil || !strings.Contains(out, "UP") {
		return nil, fmt.Errorf("%s-ctl: scontrol ping: %v %s", c.project, err, out)
	}
	return c, nil
}

// run runs a command on this host and returns its output and error together.
func run(name string, args ...string) (string, error) { return slurmkit.Run(nil, name, args...) }

// on runs a command as root in a container of the cluster (ctl, c1, c2, backend).
func (c *cluster) on(node string, args ...string) (string, error) { return c.kit.On(node, args...) }

type result struct {
	stdout, stderr string
	code           int
}

// asUser runs a bash command line as gymuser on ctl (the login node) in
// dir (a path inside the containers). env holds NAME=VALUE pairs; they
// travel as docker's environment (`-e NAME`), never on a command line.
func (c *cluster) asUser(t testing.TB, timeout time.Duration, env []string, dir, cmdline string) result {
	t.Helper()
	r := c.kit.AsUser(t, timeout, env, dir, cmdline)
	return result{r.Stdout, r.Stderr, r.Code}
}

func (c *cluster) tokenEnv() []string { return []string{"OTEL_TOKEN=" + c.token} }

// jobDir makes a fresh job dir owned by gymuser; returns its host path and
// its path in the containers.
func (c *cluster) jobDir(t testing.TB, name string) (host, inside string) {
	t.Helper()
	tag := name + "-" + fmt.Sprint(time.Now().UnixNano()%1e9)
	host = filepath.Join(c.work, "jobs", tag)
	if err := os.MkdirAll(host, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(host, jobUID, jobUID); err != nil {
		t.Fatal(err)
	}
	return host, "/jobs/" + tag
}

// writeFile writes a file owned by gymuser.
func writeFile(t testing.TB, p, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, jobUID, jobUID); err != nil {
		t.Fatal(err)
	}
}

func jobIDOf(t testing.TB, r result) string {
	t.Helper()
	return slurmkit.JobIDOf(t, slurmkit.Result{Stdout: r.stdout, Stderr: r.stderr, Code: r.code})
}

// nodeStates is sinfo's view, e.g. "c1=idle c2=idle".
func (c *cluster) nodeStates(t testing.TB) string { t.Helper(); return c.kit.NodeStates(t) }

// patience is the least time a test waits (slurmkit.Patience).
const patience = slurmkit.Patience

// waitIdle waits until the queue is empty and both nodes are idle; a
// drained or down node fails the test at once. within is at least
// patience.
func (c *cluster) waitIdle(t testing.TB, within time.Duration) { t.Helper(); c.kit.WaitIdle(t, within) }

// userProcs lists every process of gymuser on a node.
func (c *cluster) userProcs(node string) []string { return c.kit.UserProcs(node, "") }

// waitNothingLeft waits (bounded) until no process of gymuser runs on any
// compute node and no record of the job is left.
func (c *cluster) waitNothingLeft(t testing.TB, jobID string) {
	t.Helper()
	slurmkit.WaitNone(t, patience, "still there after the job", func() []string {
		var left []string
		for _, n := range c.kit.Nodes {
			for _, p := range c.userProcs(n) {
				left = append(left, n+": "+p)
			}
			if jobID != "" {
				if out, err := c.on(n, "test", "-e", "/run/gym-otel/"+n+"/"+jobID); err == nil {
					left = append(left, n+": record dir /run/gym-otel/"+n+"/"+jobID+out)
				}
			}
		}
		return left
	})
}

// slurmdLog returns a node's slurmd log.
func (c *cluster) slurmdLog(t testing.TB, node string) string {
	t.Helper()
	return c.kit.SlurmdLogs(t, node)
}

// logTime finds the first line of a slurmd log matching re (one group
// after the timestamp is allowed) and returns its time (the containers
// log in UTC).
func logTime(log string, re string) (time.Time, bool) {
	m := regexp.MustCompile(`\[([0-9T:.-]+)\] (?:\[[^]]*\] )?` + re).FindStringSubmatch(log)
	if m == nil {
		return time.Time{}, false
	}
	tm, err := time.Parse("2006-01-02T15:04:05.000", m[1])
	return tm, err == nil
}

func lastLine(t testing.TB, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			last = s
		}
	}
	return last
}

// switchVariant rewrites slurm.conf and restarts the daemons (variant.sh).
func (c *cluster) switchVariant(t testing.TB, variant string) {
	t.Helper()
	if c.variant == variant {
		return
	}
	out, err := run(filepath.Join(here, "variant.sh"), c.suite, variant)
	if err != nil {
		t.Fatalf("variant.sh %s %s: %v\n%s", c.suite, variant, err, out)
	}
	c.variant = variant
	c.waitIdle(t, 60*time.Second)
}

// scanFor lists the files under root that contain s.
func scanFor(root, s string) []string {
	var hits []string
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || fi.Size() > 256<<20 {
			return nil
		}
		data, err := os.ReadFile(p)
		if err == nil && bytes.Contains(data, []byte(s)) {
			hits = append(hits, p)
		}
		return nil
	})
	return hits
}

// owner is a file's uid and gid.
func owner(fi os.FileInfo) (int, int) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, -1
	}
	return int(st.Uid), int(st.Gid)
}

// sbatch submits as gymuser (from dir, with env) and returns the job id.
// The tests poll the job themselves: sbatch --wait polls at growing
// intervals and added up to 30 s to a 13 s job.
func (c *cluster) sbatch(t testing.TB, env []string, dir, args string) string {
	t.Helper()
	return c.kit.Sbatch(t, env, dir, args)
}

// waitJob waits until job id has ended (a final state, not COMPLETING)
// and returns its state and ExitCode (e.g. "COMPLETED", "0:0"); past
// within (at least patience) the test fails.
func (c *cluster) waitJob(t testing.TB, id string, within time.Duration) (state, exit string) {
	t.Helper()
	return c.kit.WaitJobEnd(t, id, within)
}
