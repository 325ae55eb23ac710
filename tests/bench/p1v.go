package main

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
)

// p1vArm is one installation P1V compares: its name in the rows and the
// plugstack snippet that selects it ("" for no plugin).
type p1vArm struct {
	name, snippet string
}

// emptyJobs submits n empty batch jobs one after the other (after one
// uncounted warm-up job) and returns each one's id, submission and the
// moment it left the queue.
func emptyJobs(n int) ([]sbJob, error) {
	empty, err := writeScript("empty.sh", "")
	if err != nil {
		return nil, err
	}
	var jobs []sbJob
	for i := 0; i <= n; i++ {
		t0 := time.Now()
		id, _, err := sbatch("-N1 -o /dev/null "+empty, false)
		if err != nil {
			return nil, err
		}
		end, err := waitGone(id, 25*time.Millisecond, 60*time.Second)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			jobs = append(jobs, sbJob{id, t0, end})
		}
	}
	return jobs, nil
}

// runP1V measures P1, an empty batch job's allocation to its end (none of
// them asks for a collector), with three installations: no plugin,
// gym_otel_step.so (the same plugin without job prolog and epilog
// callbacks) and gym_otel.so (the default), in rounds of four blocks of
// perBlock jobs: none, step-only, default, none again (the A-against-A
// control). Each ratio is of the arms' medians, with a 95 % bootstrap
// interval (the jobs of each arm resampled, 4000 draws).
func runP1V(rounds, perBlock int, withEmpty bool) ([]Row, error) {
	if err := slurmkit.Install(repo, installDir, "build/gym_otel_step.so"); err != nil {
		return nil, fmt.Errorf("%v (make build builds build/gym_otel_step.so)", err)
	}
	def, err := os.ReadFile(conf)
	if err != nil {
		return nil, err
	}
	step := strings.Replace(string(def), "/gym_otel.so ", "/gym_otel_step.so ", 1)
	arms := []p1vArm{{"none", ""}, {"step-only", step}, {"default", string(def)}, {"none (control)", ""}}
	if withEmpty {
		// The floor of any SPANK plugin: one with slurm_spank_init only.
		src := filepath.Join(installDir, "empty_spank.c")
		so := filepath.Join(installDir, "empty_spank.so")
		if err := os.WriteFile(src, []byte("#include <slurm/spank.h>\nSPANK_PLUGIN(empty, 1);\nint slurm_spank_init(spank_t sp, int ac, char **av) { (void)sp; (void)ac; (void)av; return 0; }\n"), 0o644); err != nil {
			return nil, err
		}
		if _, err := sh("gcc", "-O2", "-fPIC", "-shared", "-o", so, src); err != nil {
			return nil, err
		}
		arms = append(arms[:1], append([]p1vArm{{"empty plugin", "required " + so + "\n"}}, arms[1:]...)...)
	}
	got := make([][]sbJob, len(arms))
	for r := 0; r < rounds; r++ {
		for i, a := range arms {
			if a.snippet == "" {
				err = os.Remove(snippet)
				if os.IsNotExist(err) {
					err = nil
				}
			} else {
				err = os.WriteFile(snippet, []byte(a.snippet), 0o644)
			}
			if err != nil {
				return nil, err
			}
			if _, err := sh(filepath.Join(repo, "tests/slurm/restart-slurmd.sh")); err != nil {
				return nil, err
			}
			if err := waitIdle(30 * time.Second); err != nil {
				return nil, err
			}
			jobs, err := emptyJobs(perBlock)
			if err != nil {
				return nil, err
			}
			got[i] = append(got[i], jobs...)
			logf("P1V round %d/%d: %s, submit to end median %.0f ms", r+1, rounds, a.name, 1000*median(sbatchSecs(jobs)))
		}
	}
	if err := usePlugin(true); err != nil {
		return nil, err
	}
	alloc := allocTimes()
	secsOf := func(jobs []sbJob) []float64 {
		var v []float64
		for _, j := range jobs {
			if t, ok := alloc[j.id]; ok {
				v = append(v, secs(j.end.Sub(t)))
			}
		}
		return v
	}
	byName := map[string][]float64{}
	for i, a := range arms {
		byName[a.name] = secsOf(got[i])
	}
	none, stepOnly, full, none2 := byName["none"], byName["step-only"], byName["default"], byName["none (control)"]
	base := append(append([]float64(nil), none...), none2...)
	load, _ := os.ReadFile("/proc/loadavg")
	ratioRow := func(what string, a, b []float64, target string, goal float64) Row {
		lo, hi := bootRatio(a, b, 4000)
		met := "-"
		if goal > 0 {
			met = yes(hi <= goal)
		}
		return Row{
			ID: "P1V", What: fmt.Sprintf("%s (n=%d / %d)", what, len(a), len(b)),
			Figure: fmt.Sprintf("%.3f (%.1f / %.1f ms)", median(a)/median(b), 1000*median(a), 1000*median(b)),
			Spread: fmt.Sprintf("95%% CI %.3f-%.3f", lo, hi),
			Target: target, Met: met,
		}
	}
	rows := []Row{
		ratioRow("an empty job's allocation to its end: step-only plugin (no job prolog/epilog) / no plugin", stepOnly, base, "CI upper <= 1.05", 1.05),
		ratioRow("the same: default plugin (job prolog/epilog) / no plugin", full, base, "CI upper <= 1.05", 1.05),
		ratioRow("the same: default plugin / step-only plugin", full, stepOnly, "-", 0),
		ratioRow("A-against-A: no plugin, second blocks / first blocks", none2, none, "CI holds 1", 0),
	}
	rows[len(rows)-1].Met = yes(func() bool { lo, hi := bootRatio(none2, none, 4000); return lo <= 1 && hi >= 1 }())
	if withEmpty {
		empty := byName["empty plugin"]
		rows = append(rows,
			ratioRow("the same: a SPANK plugin with slurm_spank_init only / no plugin", empty, base, "-", 0),
			ratioRow("the same: step-only plugin / that empty plugin", stepOnly, empty, "-", 0))
	}
	rows = append(rows, Row{ID: "P1V", What: "rounds x jobs per block; load average at the end",
		Figure: fmt.Sprintf("%d x %d", rounds, perBlock), Spread: strings.Join(strings.Fields(string(load))[:3], " "), Target: "-", Met: "-"})
	return rows, nil
}

func sbatchSecs(jobs []sbJob) []float64 {
	var v []float64
	for _, j := range jobs {
		v = append(v, secs(j.end.Sub(j.submit)))
	}
	return v
}

// bootRatio is the 95 % percentile bootstrap interval of median(a)/median(b),
// each sample resampled with replacement reps times (a fixed seed: the
// same data give the same interval).
func bootRatio(a, b []float64, reps int) (lo, hi float64) {
	if len(a) == 0 || len(b) == 0 {
		return 0, 0
	}
	rng := rand.New(rand.NewSource(43))
	draw := func(v []float64, buf []float64) float64 {
		for i := range buf {
			buf[i] = v[rng.Intn(len(v))]
		}
		return median(buf)
	}
	ba, bb := make([]float64, len(a)), make([]float64, len(b))
	r := make([]float64, reps)
	for i := range r {
		r[i] = draw(a, ba) / draw(b, bb)
	}
	sort.Float64s(r)
	return r[int(0.025*float64(reps))], r[int(0.975*float64(reps))-1]
}
