// Package plugin_test runs the gym_otel SPANK plugin on a real local Slurm
// (tests/slurm: munge, slurmctld, two `slurmd -N gn1/gn2` on this host),
// loaded as `required`, with jobs submitted as the unprivileged gymuser.
//
// Needs root, Debian's Slurm packages and `make build` (plus the collector
// of `make collector`). Runs only with GYM_OTEL_PLUGIN_TESTS=1 (`make
// plugin-test`); GYM_OTEL_KEEP_SLURM=1 leaves the cluster up afterwards.
package plugin_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

const backendToken = "tok-gym-otel-test-5c1f9e"

// A second cluster of these tests can run beside the first on one host:
// set GOS_PLUGIN_INSTANCE=N (1..9) to shift the backend's ports, the
// record, plugin and backend dirs, and (through tests/slurm's variables)
// the cluster's state dir, ports, munged and ClusterName.
var (
	instance    = os.Getenv("GOS_PLUGIN_INSTANCE")
	backendPort = shifted(14718)
	backendHC   = shifted(14733)
	vllmPort    = shifted(18123) // the e2e job's vLLM stand-in
	recordDir   = "/run/gym-otel-plugin-test" + instance
	backendDir  = filepath.Join(os.TempDir(), "gym-otel-plugin-backend"+instance)
)

// runsAll reports whether the whole package runs (no -test.run filter): a
// filtered run may have run no job whose files a scan could read.
func runsAll() bool {
	f := flag.Lookup("test.run")
	return f == nil || f.Value.String() == ""
}

// clusterName is the test cluster's ClusterName (tests/slurm/up.sh).
func clusterName() string {
	if c := os.Getenv("GOS_SLURM_CLUSTER"); c != "" {
		return c
	}
	return "gymtest"
}

// shifted is port + 100 x GOS_PLUGIN_INSTANCE.
func shifted(port int) string {
	n, _ := strconv.Atoi(instance)
	return strconv.Itoa(port + 100*n)
}

func init() {
	if instance == "" {
		return
	}
	n, _ := strconv.Atoi(instance)
	for k, v := range map[string]string{
		"GOS_SLURM_STATE":      "/var/lib/gym-otel-test" + instance + "/slurm",
		"GOS_SLURMCTLD_PORT":   strconv.Itoa(16817 + 100*n),
		"GOS_SLURMD_PORT_BASE": strconv.Itoa(16820 + 100*n),
		"GOS_MUNGE_SOCKET":     "/run/gym-otel-test" + instance + "-munge/munge.socket.2",
		"GOS_SLURM_CLUSTER":    "gymtest" + instance,
		"GOS_SLURM_USER":       "gymuser" + instance,
		"GOS_SLURM_UID":        strconv.Itoa(2001 + 10*n),
	} {
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
}

var (
	root        = testenv.Root()
	slurmEnv    = map[string]string{}
	jobsDir     string
	stateDir    string
	plugDir     = "/var/lib/gym-otel-test" + instance + "/plugin"
	snippet     string
	goodConf    string
	setupErr    error
	otlpBackend slurmkit.Backend // the tests' OTLP backend
)

func TestMain(m *testing.M) {
	if os.Getenv("GYM_OTEL_PLUGIN_TESTS") != "1" {
		fmt.Println("tests/plugin: skipped (real Slurm tests run with GYM_OTEL_PLUGIN_TESTS=1: make plugin-test)")
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		fmt.Println("tests/plugin: must run as root")
		os.Exit(1)
	}
	code := 1
	if err := setup(); err != nil {
		fmt.Fprintf(os.Stderr, "tests/plugin: setup: %v\n", err)
	} else {
		code = m.Run()
		// After every job of every test: the token is nowhere it must not be.
		if err := tokenNowhere(); err != nil && code == 0 && runsAll() {
			fmt.Fprintf(os.Stderr, "tests/plugin: %v\n", err)
			code = 1
		} else if err == nil {
			fmt.Println("tests/plugin: the backend token is in no Slurm log, job file or record")
		} else {
			fmt.Printf("tests/plugin: token scan not judged (a filtered or failing run): %v\n", err)
		}
	}
	teardown()
	os.Exit(code)
}

func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func setup() error {
	col := filepath.Join(root, "build", "otelcol-gym")
	if p := os.Getenv("GYM_OTEL_COLLECTOR"); p != "" {
		col = p
	}
	for _, f := range []string{"build/gym_otel.so", "build/gym_otel_core.so", "build/gym-otel-spank"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			return fmt.Errorf("%s missing: run make build", f)
		}
	}
	if _, err := os.Stat(col); err != nil {
		return fmt.Errorf("collector %s missing: run make collector", col)
	}
	// Install as an admin would: root-owned copies readable by everyone.
	if err := slurmkit.Install(root, plugDir, "build/gym_otel.so", "build/gym_otel_core.so", "build/gym-otel-spank"); err != nil {
		return err
	}
	site := fmt.Sprintf(`otel:
  endpoint: http://127.0.0.1:%s
  service_name: gym-plugin-test
  token_env: OTEL_TOKEN
  binary: %s
  gpu_metrics_port: null
  node_metrics_port: null
  scrape_interval_seconds: 1
  health_check_timeout_seconds: 20
  export_timeout_seconds: 1
  shutdown_timeout_seconds: 8
`, backendPort, col)
	if err := os.WriteFile(filepath.Join(plugDir, "site.yaml"), []byte(site), 0o644); err != nil {
		return err
	}
	goodConf = slurmkit.PlugstackLine(plugDir, recordDir)
	clusterConf = filepath.Join(os.TempDir(), "gym-otel"+instance+".conf")
	if err := os.WriteFile(clusterConf, []byte(goodConf), 0o644); err != nil {
		return err
	}
	// The backend: a collector with bearer auth writing jsonl files.
	otlpBackend = slurmkit.Backend{Port: backendPort, HealthPort: backendHC, Token: backendToken, Dir: backendDir, Collector: col}
	if err := otlpBackend.Start(root); err != nil {
		return err
	}
	if err := upCluster(); err != nil {
		return err
	}
	jobsDir, stateDir = slurmEnv["GOS_SLURM_JOBS"], slurmEnv["GOS_SLURM_STATE"]
	kit.User, kit.Dir = slurmEnv["GOS_SLURM_USER"], jobsDir
	snippet = filepath.Join(slurmEnv["GOS_SLURM_PLUGSTACK_D"], filepath.Base(clusterConf)) // up.sh installs it under its own name
	if jobsDir == "" || stateDir == "" {
		return fmt.Errorf("up.sh printed no GOS_SLURM_JOBS/GOS_SLURM_STATE: %v", slurmEnv)
	}
	return nil
}

// clusterConf is the plugstack snippet the cluster was brought up with.
var clusterConf string

// upCluster brings the test cluster up (tests/slurm/up.sh: two nodes, the
// plugin's snippet, PrologFlags from GYM_OTEL_PROLOG_FLAGS, else Alloc)
// with extra up.sh arguments (e.g. --cgroup), restarting the daemons when
// slurm.conf changes, and records the cluster's environment.
func upCluster(extra ...string) error {
	// The plugin needs PrologFlags=Alloc for the job prolog to see the
	// job's spec on every node (without it, a node other than the batch
	// node runs the prolog at its first srun step, with srun's own
	// job-control env: no spec there).
	flags := os.Getenv("GYM_OTEL_PROLOG_FLAGS")
	if flags == "" {
		flags = "Alloc"
	}
	for i, a := range extra {
		if a == "--prolog-flags" && i+1 < len(extra) {
			flags = extra[i+1]
			extra = append(extra[:i:i], extra[i+2:]...)
			break
		}
	}
	if clusterConf == "" {
		clusterConf = filepath.Join(os.TempDir(), "gym-otel"+instance+".conf")
	}
	args := append([]string{"--nodes", "2", "--gpus", "2", "--prolog-flags", flags, "--no-plugstack", "--plugstack", clusterConf}, extra...)
	exports, err := slurmkit.UpLocal(root, nil, args...)
	if err != nil {
		return err
	}
	for k, v := range exports {
		slurmEnv[k] = v
		os.Setenv(k, v)
	}
	return nil
}

// withCluster brings the test cluster up with extra up.sh arguments
// (upCluster) for one test and back to the default at its end.
func withCluster(t testing.TB, extra ...string) {
	t.Helper()
	if err := upCluster(extra...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := upCluster(); err != nil {
			t.Error(err)
		}
	})
}

// withClusterConf brings the cluster up (as withCluster, with extra)
// with conf as the plugin's plugstack snippet, and puts the default
// snippet (goodConf) back at the test's end, before withCluster's cleanup
// brings the default cluster back up. It waits for the nodes to be idle.
func withClusterConf(t testing.TB, conf string, extra ...string) {
	t.Helper()
	if err := os.WriteFile(clusterConf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	withCluster(t, extra...)
	t.Cleanup(func() {
		if err := os.WriteFile(clusterConf, []byte(goodConf), 0o644); err != nil {
			t.Error(err)
		}
	})
	waitIdle(t)
}

func teardown() {
	otlpBackend.Stop(root)
	if os.Getenv("GYM_OTEL_KEEP_SLURM") == "1" {
		return
	}
	if snippet != "" {
		_ = os.Remove(snippet)
	}
	_, _ = run(filepath.Join(root, "tests/slurm/down.sh"))
}

// result of a command run as gymuser.
type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// patience is the least time a test waits (slurmkit.Patience).
const patience = slurmkit.Patience

// kit is the local cluster the tests run on: every node is this host.
var kit = &slurmkit.Cluster{
	Runner:    slurmkit.Local{},
	Nodes:     []string{"gn1", "gn2"},
	SlurmdLog: func(n string) string { return filepath.Join(stateDir, "slurmd-"+n+".log") },
}

// asUser runs a bash command line as gymuser in the shared jobs dir with
// SLURM_CONF and the given extra environment (slurmkit.Cluster.AsUser).
func asUser(t testing.TB, timeout time.Duration, env []string, cmdline string) result {
	t.Helper()
	r := kit.AsUser(t, timeout, env, "", cmdline)
	return result{r.Stdout, r.Stderr, r.Code, r.Took}
}

// writeScript writes an executable job script into the jobs dir.
func writeScript(t testing.TB, name, body string) string {
	t.Helper()
	p, err := slurmkit.WriteScript(filepath.Join(jobsDir, name), body)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// nodeStates returns sinfo's node states, e.g. "gn1=idle gn2=idle".
func nodeStates(t testing.TB) string { t.Helper(); return kit.NodeStates(t) }

// waitIdle waits until the queue is empty and every node is idle; a
// drained or down node fails the test.
func waitIdle(t testing.TB) { t.Helper(); kit.WaitIdle(t, patience) }

// userProcs lists gymuser's processes whose command line contains pat.
func userProcs(pat string) []string {
	return kit.UserProcs("", pat)
}

// waitNoCollector waits (bounded) until gymuser runs no supervisor or collector.
func waitNoCollector(t testing.TB) {
	t.Helper()
	slurmkit.WaitNone(t, patience, "still running after the job", func() []string { return kit.CollectorProcs("") })
}

// withSnippet replaces the plugstack snippet for submit-side tests (sbatch,
// salloc and srun read plugstack.conf on every run; slurmd keeps its cached
// copy) and restores it at the end.
func withSnippet(t testing.TB, content string) {
	t.Helper()
	if err := os.WriteFile(snippet, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(snippet, []byte(goodConf), 0o644); err != nil {
			t.Error(err)
		}
	})
}

// slurmdLogs is gn1's slurmd log, then gn2's.
func slurmdLogs(t testing.TB) string { t.Helper(); return kit.SlurmdLogs(t) }

func tokenEnv() []string { return []string{"OTEL_TOKEN=" + backendToken} }

// jsonlLines checks that every line of metrics.jsonl, traces.jsonl and
// logs.jsonl in dir is JSON (a missing file or a bad line fails the test)
// and returns the number of lines of each.
func jsonlLines(t testing.TB, dir string) map[string]int {
	t.Helper()
	lines := map[string]int{}
	for _, f := range []string{"metrics.jsonl", "traces.jsonl", "logs.jsonl"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for i, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
			if line == "" {
				continue
			}
			lines[f]++
			if !json.Valid([]byte(line)) {
				t.Errorf("%s:%d: not JSON", f, i+1)
			}
		}
	}
	return lines
}

// waitJobState polls `scontrol show job` every 500 ms until job id is in
// one of states and returns that state (slurmkit.Cluster.WaitJobState).
func waitJobState(t testing.TB, id string, within time.Duration, states ...string) string {
	t.Helper()
	return kit.WaitJobState(t, id, within, states...)
}

// waitJobsGone waits until none of ids is in the queue.
func waitJobsGone(t testing.TB, within time.Duration, ids []string) {
	t.Helper()
	kit.WaitJobsGone(t, within, ids...)
}

// waitFile waits, polling every 100 ms, until path exists; past within
// (at least patience) the test fails.
func waitFile(t testing.TB, within time.Duration, path string) {
	t.Helper()
	slurmkit.WaitFile(t, within, path)
}

// jobIDOf is the job id sbatch printed, or fails the test.
func jobIDOf(t testing.TB, r result) string {
	t.Helper()
	return slurmkit.JobIDOf(t, slurmkit.Result{Stdout: r.stdout, Stderr: r.stderr, Code: r.code})
}
