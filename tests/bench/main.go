// Command bench measures what gym-otel-spank costs, against its anchors
// (P1-P7 of docs/performance.md), on a local Slurm of its own, and prints
// one table: id, what, figure, spread, target, met. It asserts nothing and
// is never part of `make test`; run it with `make bench` (root; it installs
// and starts what it needs, and stops it again).
//
// The bench's Slurm is separate from the plugin tests' cluster: state dir
// /var/lib/gym-otel-bench/slurm, slurmctld port 17817, slurmd 17820+, its own
// munged. Every comparison runs in one invocation, interleaved in blocks over
// several rounds, with an A-against-A control.
//
// Environment:
//
//	GYM_OTEL_BENCH_QUICK=1      fewer rounds and samples, 15 s load steps, 60 s outages (about 21 minutes;
//	                            default about 49)
//	GYM_OTEL_BENCH_ONLY=P1,P2   only these (P1 includes P6, P2 includes P3, P4 includes P5 and P4M; P1S is
//	                            srun true as a step of a --gym-otel job against one without the flag; P3B is P3
//	                            at interval 15 s alone, with each target's wait for its first sample; P7,
//	                            inspect of 1 GB of jsonl over 2 nodes (includes P7N: the same over 64), P8, the files and the backend's copy under five
//	                            backend behaviours, with delivery collector and with delivery files (one replay after each), and
//	                            P4M, the idle collector's memory by configuration and runtime setting,
//	                            P4I, P4's two idle rows alone (no P5 load, no P4M), P3D, the
//	                            delivery of the drain's spans under delivery: collector: its ms,
//	                            P9, node_exporter's bytes in metrics.jsonl with local_node_metrics,
//	                            P10, delivery from the files through a 10-minute outage (quick: 1 minute),
//	                            run without Slurm when alone)
//	GYM_OTEL_BENCH_LONG_OUTAGE=1 P10 also through a 1-hour outage (about 80 minutes more)
//	GYM_OTEL_BENCH_OUTAGE_SECONDS=N  P8's length of each outage run (default 180, quick 60; P8 takes
//	                            ten times that, a minute each with the collector's delivery and about
//	                            two and a half each with delivery from the files and its replay)
//	GYM_OTEL_BENCH_BASELINE=DIR a checkout whose build/ holds an earlier plugin, core and CLI: P1S also
//	                            measures its flagged and unflagged steps, against this build's; P2 also
//	                            runs a one-node flagged job with that build (and its collector) in every
//	                            round, beside this build's, and prints the two starts and their difference
//	GYM_OTEL_BENCH_P1S_ROUNDS=N P1S's rounds (default 6, quick 2), 15 steps per block
//	GYM_OTEL_BENCH_P23_ROUNDS=N P2/P3's rounds (default 5, quick 2): more flagged jobs for the start's
//	                            steps, each round six jobs and a Gym-style one of about 27 s
//	GYM_OTEL_BENCH_P1V=R,J      P1V's rounds and empty jobs per block (default 8,25: 200 jobs per arm;
//	                            quick 2,10). P1V (only when named in GYM_OTEL_BENCH_ONLY): an empty job's
//	                            allocation to its end with no plugin, gym_otel_step.so (no job
//	                            prolog/epilog) and gym_otel.so, ratios with 95 % bootstrap intervals
//	GYM_OTEL_BENCH_P1V_EMPTY=1  P1V also with a SPANK plugin that has slurm_spank_init only (built by
//	                            the bench with gcc): the floor of any plugin
//	GYM_OTEL_BENCH_TASK_CGROUP=1 the bench's Slurm with proctrack/cgroup and task/cgroup (tests/slurm/up.sh
//	                            --cgroup, cgroup v1), as most sites run it: a step's launch that makes cgroups
//	GYM_OTEL_BENCH_OUT=FILE     also write the table there (default build/bench/result.txt)
package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// scrapeInterval is the site's scrape_interval_seconds in the bench, in
// seconds.
const scrapeInterval = 5

// Row is one line of the result table.
type Row struct {
	ID, What, Figure, Spread, Target, Met string
}

func main() {
	_, file, _, _ := runtime.Caller(0)
	repo = filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	if wd, err := os.Getwd(); err == nil {
		if _, err := os.Stat(filepath.Join(wd, "tests/slurm/up.sh")); err == nil {
			repo = wd
		}
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: must run as root (it runs its own Slurm)")
		os.Exit(2)
	}
	quick := os.Getenv("GYM_OTEL_BENCH_QUICK") == "1"
	only := map[string]bool{}
	for _, p := range strings.Split(os.Getenv("GYM_OTEL_BENCH_ONLY"), ",") {
		if p = strings.ToUpper(strings.TrimSpace(p)); p != "" {
			only[p] = true
		}
	}
	want := func(ids ...string) bool {
		if len(only) == 0 {
			return true
		}
		for _, id := range ids {
			if only[id] {
				return true
			}
		}
		return false
	}
	outageEnv := os.Getenv("GYM_OTEL_BENCH_OUTAGE_SECONDS")
	out := os.Getenv("GYM_OTEL_BENCH_OUT")
	if out == "" {
		out = filepath.Join(repo, "build/bench/result.txt")
	}

	// Rounds and samples: about 15 minutes by default, 7 in quick mode.
	p1Rounds, p1N, p1Sbatch := 4, 10, 4
	p1sRounds, p1sN := 6, 15
	p23Rounds, p3Rounds, p3dJobs := 5, 3, 8
	loadDur, idle, loadJobs := 60*time.Second, 15*time.Second, 3
	scrapeWin := 240 * time.Second
	p4mRounds, p4mWindow := 2, 20
	outageDur := 180 * time.Second
	if quick {
		outageDur = 60 * time.Second
		p1Rounds, p1N, p1Sbatch = 2, 6, 2
		p1sRounds, p1sN = 2, 6
		p23Rounds, p3Rounds, p3dJobs = 2, 1, 4
		loadDur, idle, loadJobs = 15*time.Second, 10*time.Second, 2
		scrapeWin = 60 * time.Second
		p4mRounds, p4mWindow = 1, 15
	}
	if v := os.Getenv("GYM_OTEL_BENCH_P23_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: GYM_OTEL_BENCH_P23_ROUNDS=%q is not a positive number of rounds\n", v)
			os.Exit(2)
		}
		p23Rounds = n
	}

	if v := os.Getenv("GYM_OTEL_BENCH_P1S_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			fmt.Fprintf(os.Stderr, "bench: GYM_OTEL_BENCH_P1S_ROUNDS: %q, want 1..100\n", v)
			os.Exit(2)
		}
		p1sRounds = n
	}
	if outageEnv != "" {
		n, err := strconv.Atoi(outageEnv)
		if err != nil || n < 10 || n > 3600 {
			fmt.Fprintf(os.Stderr, "bench: GYM_OTEL_BENCH_OUTAGE_SECONDS: %q, want 10..3600\n", outageEnv)
			os.Exit(2)
		}
		outageDur = time.Duration(n) * time.Second
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		logf("interrupted: stopping the bench's Slurm and backend")
		teardown()
		os.Exit(130)
	}()

	t0 := time.Now()
	load1, _ := os.ReadFile("/proc/loadavg")
	logf("bench: setting up (quick=%v, task/cgroup=%v)", quick, os.Getenv("GYM_OTEL_BENCH_TASK_CGROUP") == "1")
	var rows []Row
	// P7 needs no Slurm: alone, it runs without one.
	slurm := want("P1", "P1S", "P1V", "P2", "P3", "P3B", "P3D", "P4", "P4I", "P5", "P6")
	var err error
	if slurm {
		err = setup()
	}
	if err == nil && want("P1", "P6") {
		var r []Row
		if r, err = runP1(p1Rounds, p1N, p1Sbatch); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && only["P1V"] {
		rounds, per := 8, 25
		if quick {
			rounds, per = 2, 10
		}
		if v := os.Getenv("GYM_OTEL_BENCH_P1V"); v != "" {
			if _, e := fmt.Sscanf(v, "%d,%d", &rounds, &per); e != nil || rounds < 1 || per < 1 {
				fmt.Fprintf(os.Stderr, "bench: GYM_OTEL_BENCH_P1V: %q, want ROUNDS,JOBS\n", v)
				os.Exit(2)
			}
		}
		var r []Row
		if r, err = runP1V(rounds, per, os.Getenv("GYM_OTEL_BENCH_P1V_EMPTY") == "1"); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && want("P1S") {
		var r []Row
		if r, err = runP1s(p1sRounds, p1sN, os.Getenv("GYM_OTEL_BENCH_BASELINE")); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && want("P2", "P3") {
		var r []Row
		if r, err = runP23(p23Rounds, os.Getenv("GYM_OTEL_BENCH_BASELINE")); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && want("P2", "P3", "P3B") {
		var r []Row
		if r, err = runP3At15(p3Rounds); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && want("P3D") {
		var r []Row
		if r, err = runP3D(p3dJobs); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && !want("P4", "P5") && want("P4I") {
		var r []Row
		if r, err = runP4Idle(idle, scrapeWin); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && want("P4", "P5") {
		var r []Row
		if r, err = runP45(loadDur, idle, scrapeWin, loadJobs); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && want("P4", "P4M") {
		var r []Row
		if r, err = runP4Memory(p4mRounds, p4mWindow); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && want("P8") {
		var r []Row
		if r, err = runP8(outageDur, 20000); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && want("P10") {
		// A 10-minute outage (quick: 1 minute); GYM_OTEL_BENCH_LONG_OUTAGE=1
		// adds a 1-hour one.
		outages := []int{600}
		if quick {
			outages = []int{60}
		}
		if os.Getenv("GYM_OTEL_BENCH_LONG_OUTAGE") == "1" {
			outages = append(outages, 3600)
		}
		var r []Row
		if r, err = runP10(outages, 2000); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && want("P9") {
		var r []Row
		if r, err = runP9(); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && want("P7") {
		var r []Row
		if r, err = runP7(); err == nil {
			rows = append(rows, r...)
		}
	}
	if err == nil && want("P7", "P7N") {
		var r []Row
		if r, err = runP7N(); err == nil {
			rows = append(rows, r...)
		}
	}
	load2, _ := os.ReadFile("/proc/loadavg")
	if slurm {
		teardown()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	order := map[string]int{"P1": 1, "P1V": 1, "P2": 2, "P3": 3, "P3D": 3, "P4": 4, "P5": 5, "P6": 6, "P7": 7, "P7N": 7, "P8": 8, "P9": 9, "P10": 10}
	sortRows(rows, order)

	var b strings.Builder
	host, _ := os.Hostname()
	slurmV := "no Slurm (P4M, P7, P8, P9, P10 only)"
	if slurm {
		slurmV = slurmVersion()
	}
	fmt.Fprintf(&b, "gym-otel-spank bench, %s, %s, %d CPUs, %s; %v; load average before %s, after %s\n",
		time.Now().Format("2006-01-02 15:04"), host, runtime.NumCPU(), slurmV,
		time.Since(t0).Round(time.Second), strings.Join(strings.Fields(string(load1))[:3], " "),
		strings.Join(strings.Fields(string(load2))[:3], " "))
	if quick {
		b.WriteString("quick mode (GYM_OTEL_BENCH_QUICK=1): fewer rounds and samples\n")
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "id\twhat\tfigure\tspread\ttarget\tmet")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.What, r.Figure, r.Spread, r.Target, r.Met)
	}
	tw.Flush()
	fmt.Print(b.String())
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err == nil {
		_ = os.WriteFile(out, []byte(b.String()), 0o644)
	}
}

func sortRows(rows []Row, order map[string]int) {
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && order[rows[j].ID] < order[rows[j-1].ID]; j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
}

func slurmVersion() string {
	out, err := sh("sinfo", "--version")
	if err != nil {
		return "slurm ?"
	}
	return strings.TrimSpace(out)
}
