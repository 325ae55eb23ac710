// Package slurmkit is the tests' one Slurm kit: a cluster behind one
// interface that runs a command on one of its nodes (here, on this host;
// or in the node's container, by `docker exec`), and the helpers the Slurm
// suites (tests/plugin, tests/slurm-docker, the qemu guest's tests/vm/guest)
// and the benchmark (tests/bench) share, written once on it: running a command line as the job user,
// waiting for an idle cluster, node and job states, the job id sbatch
// printed, waiting for a file or for processes to go, the job user's
// processes, slurmd's logs; and the assertion blocks the suites share
// (inspect's report of a job, the final sample of a counter, a node's
// Slurm phase spans: PhaseSpans, CheckNodePhases). Never
// imported by production code.
package slurmkit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Patience is the least time a test waits for a condition, a job or a
// command before it fails: on a loaded machine every step is slower, and a
// test may be slow but never flaky. A bound that is a property of the
// product is asserted on its own, from what was measured or logged.
const Patience = 2 * time.Minute

// Result is what a command line run as the job user did: its standard
// output and error, its exit code (124 when timeout killed it), and how
// long it ran.
type Result struct {
	Stdout, Stderr string
	Code           int
	Took           time.Duration
}

// Runner runs commands on the nodes of one cluster.
type Runner interface {
	// On runs args as root on node and returns its standard output and
	// error together; the error is the command's (exit status or failure
	// to start).
	On(node string, args ...string) (string, error)
	// As runs the bash command line cmdline as user on node, in dir, with
	// env (NAME=VALUE pairs, passed as the process environment, never on
	// a command line: they may hold the token), killed after timeout
	// (whole seconds). The error says only that it could not be run; an
	// exit status is the Result's Code.
	As(node, user, dir string, env []string, timeout time.Duration, cmdline string) (Result, error)
}

// Run runs a command on this host as this process's user, with its
// environment and extra (NAME=VALUE) added, and returns its standard
// output and error together.
func Run(extra []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	if len(extra) > 0 {
		cmd.Env = append(os.Environ(), extra...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Local is a cluster whose daemons all run on this host (tests/slurm:
// several `slurmd -N` beside one slurmctld): every node is this host.
type Local struct {
	// Env is added to this process's environment for root's commands
	// (the cluster's SLURM_CONF, ports, munged socket); nil adds nothing.
	Env []string
}

// On runs args as root on this host (node is not used).
func (l Local) On(_ string, args ...string) (string, error) {
	return Run(l.Env, args[0], args[1:]...)
}

// As runs cmdline with bash as user through setpriv (the user's groups),
// after `cd dir`, with a clean environment: PATH, HOME, USER, LOGNAME,
// LANG=C.UTF-8, the cluster's SLURM_CONF (from Env, else this process's),
// then env.
func (l Local) As(_ string, user, dir string, env []string, timeout time.Duration, cmdline string) (Result, error) {
	conf := os.Getenv("SLURM_CONF")
	for _, kv := range l.Env {
		if v, ok := strings.CutPrefix(kv, "SLURM_CONF="); ok {
			conf = v
		}
	}
	cmd := exec.Command("timeout", strconv.Itoa(int(timeout.Seconds())), "setpriv", "--reuid="+user, "--regid="+user,
		"--init-groups", "/bin/bash", "-c", "cd "+dir+" && "+cmdline)
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "SLURM_CONF=" + conf,
		"HOME=/home/" + user, "USER=" + user, "LOGNAME=" + user, "LANG=C.UTF-8"}, env...)
	return result(cmd)
}

// Docker is a cluster of containers named <Project>-<node> (tests/slurm-docker:
// ctl, c1, c2, backend).
type Docker struct {
	Project string
}

// On runs args as root in the node's container.
func (d Docker) On(node string, args ...string) (string, error) {
	return Run(nil, "docker", append([]string{"exec", d.Project + "-" + node}, args...)...)
}

// As runs cmdline with bash as user in the node's container, in dir (a
// path inside the containers), with HOME and USER and env passed as
// docker's environment (`-e NAME`, the value from docker's own).
func (d Docker) As(node, user, dir string, env []string, timeout time.Duration, cmdline string) (Result, error) {
	args := []string{"exec", "-u", user, "-w", dir, "-e", "HOME=/home/" + user, "-e", "USER=" + user}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		args = append(args, "-e", k)
	}
	args = append(args, d.Project+"-"+node, "timeout", strconv.Itoa(int(timeout.Seconds())), "bash", "-c", cmdline)
	cmd := exec.Command("docker", args...)
	cmd.Env = append(os.Environ(), env...)
	return result(cmd)
}

func result(cmd *exec.Cmd) (Result, error) {
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	start := time.Now()
	err := cmd.Run()
	r := Result{so.String(), se.String(), 0, time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.Code, err = ee.ExitCode(), nil
	}
	return r, err
}

// Cluster is one Slurm cluster under test: how to reach its nodes and
// where its user, jobs and logs are.
type Cluster struct {
	Runner
	// Login is the node the Slurm client commands and the user's command
	// lines run on ("" on a Local cluster, "ctl" in the containers).
	Login string
	// Nodes are the compute nodes' names, sorted (gn1 gn2, c1 c2).
	Nodes []string
	// User is the unprivileged job user.
	User string
	// Dir is where the user's command lines run when they name no dir.
	Dir string
	// SlurmdLog is the path, on this host, of a node's slurmd log.
	SlurmdLog func(node string) string
}

// AsUser runs cmdline as the job user on the login node, in dir (c.Dir
// when ""), with env (NAME=VALUE, in the process environment only), killed
// after timeout (at least Patience). A command that cannot be run fails
// the test.
func (c *Cluster) AsUser(t testing.TB, timeout time.Duration, env []string, dir, cmdline string) Result {
	t.Helper()
	if dir == "" {
		dir = c.Dir
	}
	r, err := c.As(c.Login, c.User, dir, env, max(timeout, Patience), cmdline)
	if err != nil {
		t.Fatalf("%s: %v", cmdline, err)
	}
	return r
}

// States returns sinfo's node states, sorted, e.g. "gn1=idle gn2=idle".
func (c *Cluster) States() (string, error) {
	out, err := c.On(c.Login, "sinfo", "-h", "-N", "-o", "%N=%T")
	if err != nil {
		return "", fmt.Errorf("sinfo: %v %s", err, out)
	}
	f := strings.Fields(out)
	sort.Strings(f)
	return strings.Join(f, " "), nil
}

// NodeStates is States, or fails the test.
func (c *Cluster) NodeStates(t testing.TB) string {
	t.Helper()
	st, err := c.States()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// AllIdle is the node states of a cluster with every node idle.
func (c *Cluster) AllIdle() string {
	var f []string
	for _, n := range c.Nodes {
		f = append(f, n+"=idle")
	}
	return strings.Join(f, " ")
}

// AwaitIdle waits until the queue is empty and every node is idle; a
// drained, down or failed node is an error at once (with sinfo -R's
// reasons), and so is within passing.
func (c *Cluster) AwaitIdle(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		q, _ := c.On(c.Login, "squeue", "-h", "-o", "%i %T")
		st, err := c.States()
		if err != nil {
			return err
		}
		if strings.Contains(st, "drain") || strings.Contains(st, "down") || strings.Contains(st, "fail") {
			reason, _ := c.On(c.Login, "sinfo", "-R")
			return fmt.Errorf("a node is not healthy: %s\n%s", st, reason)
		}
		if strings.TrimSpace(q) == "" && st == c.AllIdle() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not idle after %v: queue %q, nodes %s", within, q, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WaitIdle is AwaitIdle within at least Patience, or fails the test.
func (c *Cluster) WaitIdle(t testing.TB, within time.Duration) {
	t.Helper()
	if err := c.AwaitIdle(max(within, Patience)); err != nil {
		t.Fatal(err)
	}
}

// UserProcs lists the job user's processes on node (`pgrep -a`: pid and
// command line) whose command line contains pat (every one when pat is ""),
// zombies left out.
func (c *Cluster) UserProcs(node, pat string) []string {
	args := []string{"pgrep", "-a", "-u", c.User}
	if pat != "" {
		args = append(args, "-f", pat)
	}
	out, _ := c.On(node, args...)
	var procs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		// A zombie ("[comm] <defunct>") has exited: it holds nothing
		// but its pid until its reaper waits for it, which after its
		// parent's end is PID 1 or a subreaper, not the product.
		if l != "" && !strings.HasSuffix(l, "<defunct>") {
			procs = append(procs, l)
		}
	}
	return procs
}

// CollectorProcs lists the job user's supervisors and collectors on node.
func (c *Cluster) CollectorProcs(node string) []string {
	return append(c.UserProcs(node, "otelcol-gym"), c.UserProcs(node, "supervise --from-env")...)
}

// WaitNone polls left every 200 ms until it lists nothing; past within
// (at least Patience) the test fails with what, then what was left.
func WaitNone(t testing.TB, within time.Duration, what string, left func() []string) {
	t.Helper()
	within = max(within, Patience)
	for deadline := time.Now().Add(within); ; time.Sleep(200 * time.Millisecond) {
		l := left()
		if len(l) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, l)
		}
	}
}

// SlurmdLogs returns the slurmd logs of nodes (every node when none is
// named), one after the other; an unreadable one fails the test.
func (c *Cluster) SlurmdLogs(t testing.TB, nodes ...string) string {
	t.Helper()
	if len(nodes) == 0 {
		nodes = c.Nodes
	}
	var b strings.Builder
	for _, n := range nodes {
		data, err := os.ReadFile(c.SlurmdLog(n))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

var (
	submittedRe = regexp.MustCompile(`Submitted batch job (\d+)`)
	parsableRe  = regexp.MustCompile(`^(\d+)(;\S+)?$`)
)

// JobID is the job id in sbatch's output: "Submitted batch job N", or
// all of the output being `--parsable`'s "N" or "N;cluster".
func JobID(stdout string) (string, bool) {
	if m := submittedRe.FindStringSubmatch(stdout); m != nil {
		return m[1], true
	}
	if m := parsableRe.FindStringSubmatch(strings.TrimSpace(stdout)); m != nil {
		return m[1], true
	}
	return "", false
}

// JobIDOf is the job id sbatch printed in r, or fails the test.
func JobIDOf(t testing.TB, r Result) string {
	t.Helper()
	id, ok := JobID(r.Stdout)
	if !ok {
		t.Fatalf("no job id: code %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	return id
}

var (
	jobStateRe = regexp.MustCompile(`JobState=(\S+)`)
	exitCodeRe = regexp.MustCompile(`\bExitCode=(\S+)`)
)

// JobState is `scontrol -o show job id`'s JobState and ExitCode ("" where
// it shows none) and its whole output.
func (c *Cluster) JobState(id string) (state, exit, out string) {
	out, _ = c.On(c.Login, "scontrol", "-o", "show", "job", id)
	if m := jobStateRe.FindStringSubmatch(out); m != nil {
		state = m[1]
	}
	if m := exitCodeRe.FindStringSubmatch(out); m != nil {
		exit = m[1]
	}
	return state, exit, out
}

// WaitJobState polls the job's state every 500 ms until it is one of
// states and returns it; past within (at least Patience) the test fails,
// naming the last state seen.
func (c *Cluster) WaitJobState(t testing.TB, id string, within time.Duration, states ...string) string {
	t.Helper()
	within = max(within, Patience)
	for deadline := time.Now().Add(within); ; time.Sleep(500 * time.Millisecond) {
		state, _, _ := c.JobState(id)
		for _, s := range states {
			if state == s {
				return state
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: state %q after %s, want one of %v", id, state, within, states)
		}
	}
}

// WaitJobEnd waits until the job has ended (a final state, and no
// COMPLETING flag) and returns its state and ExitCode (e.g. "COMPLETED",
// "0:0"); past within (at least Patience) the test fails.
func (c *Cluster) WaitJobEnd(t testing.TB, id string, within time.Duration) (state, exit string) {
	t.Helper()
	within = max(within, Patience)
	for deadline := time.Now().Add(within); ; time.Sleep(250 * time.Millisecond) {
		state, exit, out := c.JobState(id)
		if state != "" && exit != "" && !strings.Contains(out, "COMPLETING") {
			switch state {
			case "PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING":
			default:
				return state, exit
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not done after %v: %s", id, within, out)
		}
	}
}

// WaitJobsGone polls squeue every 500 ms until none of ids is in the
// queue; past within the test fails, naming those left.
func (c *Cluster) WaitJobsGone(t testing.TB, within time.Duration, ids ...string) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(500 * time.Millisecond) {
		out, _ := c.On(c.Login, "squeue", "-h", "-o", "%i", "-j", strings.Join(ids, ","))
		if strings.TrimSpace(out) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs still queued or running after %v: %s", within, strings.Join(strings.Fields(out), " "))
		}
	}
}

// Sbatch submits `sbatch args` as the job user from dir with env, and
// returns the job id; a refused submission fails the test.
func (c *Cluster) Sbatch(t testing.TB, env []string, dir, args string) string {
	t.Helper()
	r := c.AsUser(t, 60*time.Second, env, dir, "sbatch "+args)
	if r.Code != 0 {
		t.Fatalf("sbatch %s: exit %d: %s%s", args, r.Code, r.Stdout, r.Stderr)
	}
	return JobIDOf(t, r)
}

// WaitFile waits, polling every 100 ms, until every path (on this host)
// exists; past within (at least Patience) the test fails.
func WaitFile(t testing.TB, within time.Duration, paths ...string) {
	t.Helper()
	within = max(within, Patience)
	deadline := time.Now().Add(within)
	for _, p := range paths {
		for {
			if _, err := os.Stat(p); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not appear within %v", p, within)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// WriteScript writes an executable bash script (body after the #! line)
// at path and returns path.
func WriteScript(path, body string) (string, error) {
	return path, os.WriteFile(path, []byte("#!/bin/bash\n"+body), 0o755)
}

// Alive reports whether pid (on this host) lives and is not a zombie.
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return !strings.Contains(string(st), ") Z ")
}
