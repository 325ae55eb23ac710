package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// Where the benchmark's own Slurm lives: a cluster separate from the plugin
// tests' (state dir, ports and munged of its own).
const (
	benchBase     = "/var/lib/gym-otel-bench"
	slurmState    = benchBase + "/slurm"
	installDir    = benchBase + "/install"
	baselineDir   = installDir + "-baseline" // GYM_OTEL_BENCH_BASELINE's build (P1S, P2)
	backendDir    = benchBase + "/backend"
	recordDir     = "/run/gym-otel-bench"
	ctldPort      = "17817"
	slurmdPort    = "17820"
	mungeSocket   = "/run/gym-otel-bench-munge/munge.socket.2"
	backendPort   = "17830"
	backendHealth = "17831"
	gymOTLPHTTP   = "17840"
	gymOTLPGRPC   = "17841"
	gymHealth     = "17842"
	benchUser     = "gymuser"
	benchToken    = "bench-token-6f1d2c"
	nodeCount     = 2
)

var (
	repo    string
	jobsDir = slurmState + "/jobs"
	snippet = slurmState + "/plugstack.conf.d/gym-otel.conf"
	conf    = filepath.Join(benchBase, "gym-otel.conf")
	logf    = func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", a...)
	}
	backend = slurmkit.Backend{Port: backendPort, HealthPort: backendHealth, Token: benchToken, Dir: backendDir,
		Collector: installDir + "/otelcol-gym"}
)

// slurmEnv is the environment of every harness script and Slurm client.
func slurmEnv() []string {
	return []string{
		"GOS_SLURM_STATE=" + slurmState,
		"GOS_SLURMCTLD_PORT=" + ctldPort,
		"GOS_SLURMD_PORT_BASE=" + slurmdPort,
		"GOS_MUNGE_SOCKET=" + mungeSocket,
		"SLURM_CONF=" + slurmState + "/slurm.conf",
	}
}

// kit is the bench's Slurm: every node is this host.
var kit = &slurmkit.Cluster{Runner: slurmkit.Local{Env: slurmEnv()}, Nodes: benchNodes(), User: benchUser, Dir: jobsDir}

// jobOtelDir is where the bench's --gym-otel job id keeps its telemetry:
// the job_dir of the bench's Gym config, its "otel" dir (the batch node's
// files; the other nodes' under nodes/<name>).
func jobOtelDir(id string) string { return filepath.Join(jobsDir, "gym-otel-"+id, "otel") }

// benchNodes are the bench cluster's nodes, gn1 to gn<nodeCount>.
func benchNodes() []string {
	var n []string
	for i := 1; i <= nodeCount; i++ {
		n = append(n, "gn"+strconv.Itoa(i))
	}
	return n
}

// sh runs a command as root with the bench's Slurm environment.
func sh(name string, args ...string) (string, error) {
	out, err := kit.On("", append([]string{name}, args...)...)
	if err != nil {
		return out, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, lastLines(out, 15))
	}
	return out, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// asUser runs a bash command line as the bench user in the jobs dir. The
// token travels in the environment only when withToken is set.
func asUser(cmdline string, withToken bool, timeout time.Duration) (string, error) {
	var env []string
	if withToken {
		env = append(env, "OTEL_TOKEN="+benchToken)
	}
	r, err := kit.As("", benchUser, jobsDir, env, timeout, cmdline)
	if err == nil && r.Code != 0 {
		err = fmt.Errorf("exit status %d", r.Code)
	}
	if err != nil {
		return r.Stdout, fmt.Errorf("%s: %v: %s", cmdline, err, lastLines(r.Stderr, 10))
	}
	return r.Stdout, nil
}

// setup installs the plugin, the CLI, the collector, the load generator and
// the vLLM stand-in as an admin would, starts the OTLP backend and the bench's Slurm with the
// plugin in plugstack.conf.d.
func setup() error {
	for _, d := range []string{benchBase, installDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		_ = os.Chmod(d, 0o755)
	}
	if err := slurmkit.Install(repo, installDir, "build/gym_otel.so", "build/gym_otel_core.so", "build/gym-otel-spank",
		"build/otelcol-gym", "build/bench/loadgen", "build/standins/vllm-standin"); err != nil {
		return fmt.Errorf("%v (run make build collector standins, and build tests/bench/loadgen)", err)
	}
	site := fmt.Sprintf(`otel:
  endpoint: http://127.0.0.1:%s
  service_name: gym-bench
  token_env: OTEL_TOKEN
  binary: %s/otelcol-gym
  gpu_metrics_port: null
  node_metrics_port: null
  scrape_interval_seconds: %d
`, backendPort, installDir, scrapeInterval)
	if err := os.WriteFile(filepath.Join(installDir, "site.yaml"), []byte(site), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(conf, []byte(slurmkit.PlugstackLine(installDir, recordDir)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(installDir, "gym-style.yaml"), []byte(gymStyleConfig), 0o644); err != nil {
		return err
	}
	if err := backend.Start(repo); err != nil {
		return err
	}
	up := []string{"--nodes", strconv.Itoa(nodeCount), "--prolog-flags", "Alloc", "--no-plugstack", "--plugstack", conf}
	if os.Getenv("GYM_OTEL_BENCH_TASK_CGROUP") == "1" {
		up = append(up, "--cgroup")
	}
	if _, err := slurmkit.UpLocal(repo, slurmEnv(), up...); err != nil {
		return err
	}
	return os.Chmod(jobsDir, 0o1777)
}

// teardown stops the backend and the bench's Slurm (jobs, daemons, munged).
func teardown() {
	stopNodeExporter()
	backend.Stop(repo)
	if _, err := sh(filepath.Join(repo, "tests/slurm/down.sh")); err != nil {
		logf("down.sh: %v", err)
	}
}

// usePlugin installs (or removes) the plugstack snippet and restarts slurmd,
// which caches the plugstack for the job prolog/epilog.
func usePlugin(on bool) error {
	if on {
		data, err := os.ReadFile(conf)
		if err != nil {
			return err
		}
		if err := os.WriteFile(snippet, data, 0o644); err != nil {
			return err
		}
	} else if err := os.Remove(snippet); err != nil && !os.IsNotExist(err) {
		return err
	}
	_, err := sh(filepath.Join(repo, "tests/slurm/restart-slurmd.sh"))
	return err
}

// useCollectorWait rewrites the installed plugstack snippet with
// collector_wait=step (step) or without it. No restart: on the bench's
// Slurm 22.05 every prolog, epilog and step reads plugstack.conf anew (a
// slurmstepd of its own); 24.11's job prolog kept slurmd's copy until
// slurmd restarted.
func useCollectorWait(step bool) error {
	data, err := os.ReadFile(conf)
	if err != nil {
		return err
	}
	if step {
		data = append([]byte(strings.TrimRight(string(data), "\n")), " collector_wait=step\n"...)
	}
	return os.WriteFile(snippet, data, 0o644)
}

// waitIdle waits (bounded) until the queue is empty and every node idle;
// a drained or down node is an error at once.
func waitIdle(limit time.Duration) error { return kit.AwaitIdle(limit) }

// waitGone polls squeue every `every` until job id has left it (the job
// and its epilogs are done); it returns the time it saw that.
func waitGone(id string, every, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		out, _ := sh("squeue", "-h", "-j", id, "-o", "%t")
		if strings.TrimSpace(out) == "" || strings.Contains(out, "Invalid job id") {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("job %s still in the queue after %v: %s", id, limit, out)
		}
		time.Sleep(every)
	}
}

var logTS = regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (.*)$`)

// logLine is one timestamped line of a Slurm daemon log.
type logLine struct {
	at   time.Time
	text string
}

// readLog returns the timestamped lines of one daemon log.
func readLog(name string) []logLine {
	f, err := os.Open(filepath.Join(slurmState, name))
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := logTS.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local)
		if err != nil {
			continue
		}
		lines = append(lines, logLine{at, m[2]})
	}
	return lines
}

// firstMatch is the time of the first line containing s, or zero.
func firstMatch(lines []logLine, s string) time.Time {
	for _, l := range lines {
		if strings.Contains(l.text, s) {
			return l.at
		}
	}
	return time.Time{}
}

var allocRE = regexp.MustCompile(`sched: Allocate JobId=(\d+) `)

// allocTimes maps job ids to the time slurmctld allocated them.
func allocTimes() map[string]time.Time {
	m := map[string]time.Time{}
	for _, l := range readLog("slurmctld.log") {
		if s := allocRE.FindStringSubmatch(l.text); s != nil {
			if _, ok := m[s[1]]; !ok {
				m[s[1]] = l.at
			}
		}
	}
	return m
}

// readNanos reads a file holding `date +%s%N`.
func readNanos(p string) (time.Time, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return time.Time{}, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %v", p, err)
	}
	return time.Unix(0, ns), nil
}

// writeScript writes an executable job script into the jobs dir.
func writeScript(name, body string) (string, error) {
	return slurmkit.WriteScript(filepath.Join(jobsDir, name), body)
}

// sbatch submits as the bench user and returns the job id and the moment
// sbatch returned.
func sbatch(args string, withToken bool) (string, time.Time, error) {
	out, err := asUser("sbatch --parsable "+args, withToken, 60*time.Second)
	ret := time.Now()
	if err != nil {
		return "", ret, err
	}
	id, ok := slurmkit.JobID(out)
	if !ok {
		return "", ret, fmt.Errorf("sbatch %s: %q", args, out)
	}
	return id, ret, nil
}

// countIn counts the occurrences of pat in file p, streaming.
func countIn(p string, pat []byte) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 8<<20)
	keep := len(pat) - 1
	var n int64
	carry := 0
	for {
		r, err := f.Read(buf[carry:])
		total := carry + r
		n += int64(bytes.Count(buf[:total], pat))
		if total > keep {
			copy(buf, buf[total-keep:total])
			carry = keep
		} else {
			carry = total
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// memOf is a process's memory in KiB (testenv.Mem: VmRSS, RssAnon,
// RssFile from status, Pss from smaps_rollup), and the charge of its
// memory control group in KiB (testenv.GroupCharge; 0 when unreadable):
// for a collector, the plugin's group of the job on the node, which holds
// the supervisor too.
type memOf struct {
	testenv.Mem
	Group float64
}

// readMem samples a process's memory (testenv.ReadMem) and its group's
// charge (testenv.GroupCharge).
func readMem(pid int) (memOf, error) {
	m, err := testenv.ReadMem(pid)
	if err != nil {
		return memOf{}, err
	}
	g, _, _ := testenv.GroupCharge(pid)
	return memOf{Mem: m, Group: g}, nil
}

// Goals of P4 for an idle collector, in MiB (issue 43): what the node
// pays, PSS (its share of the pages it maps) and anonymous memory.
const (
	p4GoalPSS  = 30
	p4GoalAnon = 16
)

// p4Figure is a P4 row's figure from samples: the medians of PSS and
// RssAnon (the headline), of the group's charge, VmRSS and RssFile
// beside, in MiB.
func p4Figure(samples []memOf) (fig string, pss, anon float64) {
	pick := func(f func(memOf) float64) float64 {
		var v []float64
		for _, m := range samples {
			v = append(v, f(m)/1024)
		}
		return median(v)
	}
	pss, anon = pick(func(m memOf) float64 { return m.PSS }), pick(func(m memOf) float64 { return m.Anon })
	group := "group ?"
	if g := pick(func(m memOf) float64 { return m.Group }); g > 0 {
		group = fmt.Sprintf("group charge %.1f", g)
	}
	fig = fmt.Sprintf("PSS %.1f MiB, anon %.1f MiB (%s; VmRSS %.1f, file %.1f)", pss, anon, group,
		pick(func(m memOf) float64 { return m.RSS }), pick(func(m memOf) float64 { return m.File }))
	return fig, pss, anon
}

// p4Met is whether the idle goals are met.
func p4Met(pss, anon float64) string { return yes(pss <= p4GoalPSS && anon <= p4GoalAnon) }

// p4Target is the idle rows' target.
var p4Target = fmt.Sprintf("PSS <= %d MiB, anon <= %d MiB (issue 43)", p4GoalPSS, p4GoalAnon)

// findProc returns the pids whose command line starts with prefix.
func findProc(prefix string) []int {
	var pids []int
	ents, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, e := range ents {
		cl, err := os.ReadFile(e)
		if err != nil || !strings.HasPrefix(strings.ReplaceAll(string(cl), "\x00", " "), prefix) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(e))); err == nil {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids
}

// findCollector returns the pids of the collectors of installDir whose
// output dir is outDir: the supervisor starts each with its configuration
// by content (--config env:...) in its held output dir, its working dir.
func findCollector(installDir, outDir string) []int {
	var pids []int
	for _, pid := range findProc(installDir + "/otelcol-gym --config env:") {
		if cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); err == nil && cwd == outDir {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ---------------------------------------------------------------- statistics

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// quart returns the 25th and 75th percentiles (nearest rank).
func quart(v []float64) (float64, float64) {
	if len(v) == 0 {
		return 0, 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	at := func(p float64) float64 { return s[int(p*float64(len(s)-1)+0.5)] }
	return at(0.25), at(0.75)
}

func minmax(v []float64) (float64, float64) {
	if len(v) == 0 {
		return 0, 0
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

func secs(d time.Duration) float64 { return d.Seconds() }
