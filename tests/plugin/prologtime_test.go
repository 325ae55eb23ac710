package plugin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPrologDuration measures the job prolog of a flagged one-node job:
// GYM_OTEL_PROLOG_RUNS jobs (skipped when unset) run one after the other
// on gn1, each of which must get a ready collector; it reports the median
// (and range) of slurmd's prolog (its log's "Running spank/prolog for
// jobid [N]" to "Finished wait for job N's prolog to complete", ms
// stamps), of the plugin's own prolog (the sum of the steps of its debug
// line "start steps on gn1 in ms: prolog ..."), of each step (the
// supervisor's own as sup.*, within the prolog's "supervisor" step), and
// of Slurm's launch of the batch step: from the prolog's end to the
// script's first line (its `date`, against slurmd's ms stamp).
func TestPrologDuration(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("GYM_OTEL_PROLOG_RUNS"))
	if runs <= 0 {
		t.Skip("a measurement: set GYM_OTEL_PROLOG_RUNS=N")
	}
	waitIdle(t)
	d := markerDir(t, "prologtime")
	// The script's first line stamps its start: from the prolog's end to
	// it is Slurm's own launch of the batch step, what a collector's start
	// overlapped with the launch could hide behind.
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf("date +%%s%%N > %s/first.$SLURM_JOB_ID\n", d))
	stamp := regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (.*)$`)
	var slurmd, ours, launch []float64
	stepMs := map[string][]float64{}
	for i := 0; i < runs; i++ {
		r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --gym-otel=job_dir=%s/run%d -o %s/job%d.out %s", d, i, d, i, script))
		if r.code != 0 {
			t.Fatalf("job %d: exit %d: %s", i, r.code, r.stderr)
		}
		job := jobIDOf(t, r)
		waitNoCollector(t)
		log := slurmdLogs(t)
		if !strings.Contains(log, "job "+job+": collector ready on gn1") {
			t.Fatalf("job %s: no ready collector in slurmd's log", job)
		}
		var start, end time.Time
		for _, line := range strings.Split(log, "\n") {
			m := stamp.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			at, err := time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local)
			if err != nil {
				continue
			}
			switch {
			case strings.Contains(m[2], "Running spank/prolog for jobid ["+job+"]"):
				start = at
			case strings.Contains(m[2], "Finished wait for job "+job+"'s prolog to complete") && !start.IsZero() && end.IsZero():
				// The first after the prolog's start: slurmd logs
				// the same line again on the job's termination.
				end = at
			}
		}
		if !start.IsZero() && end.After(start) {
			slurmd = append(slurmd, float64(end.Sub(start).Milliseconds()))
		}
		if b, err := os.ReadFile(filepath.Join(d, "first."+job)); err == nil && !end.IsZero() {
			if ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				launch = append(launch, float64(time.Unix(0, ns).Sub(end).Milliseconds()))
			}
		}
		steps := regexp.MustCompile(`gym-otel: job ` + job + `: start steps on gn1 in ms: prolog (.*); supervisor (.*)`).FindStringSubmatch(log)
		if steps == nil {
			t.Fatalf("job %s: no steps line in slurmd's log", job)
		}
		sum := 0.0
		for _, part := range strings.Split(steps[1], ", ") {
			name, ms, _ := strings.Cut(part, " ")
			v, _ := strconv.ParseFloat(ms, 64)
			sum += v
			stepMs[name] = append(stepMs[name], v)
		}
		for _, part := range strings.Split(strings.TrimSpace(steps[2]), ", ") {
			if name, ms, ok := strings.Cut(part, " "); ok {
				if v, err := strconv.ParseFloat(ms, 64); err == nil {
					stepMs["sup."+name] = append(stepMs["sup."+name], v)
				}
			}
		}
		ours = append(ours, sum)
		t.Logf("job %s: slurmd's prolog %v ms; the plugin's %v ms (%s)", job, end.Sub(start).Milliseconds(), sum, steps[1])
	}
	med := func(v []float64) string {
		if len(v) == 0 {
			return "none"
		}
		s := slices.Clone(v)
		slices.Sort(s)
		m := s[len(s)/2]
		if len(s)%2 == 0 {
			m = (s[len(s)/2-1] + s[len(s)/2]) / 2
		}
		return fmt.Sprintf("%.1f ms (%.0f..%.0f, n=%d)", m, s[0], s[len(s)-1], len(s))
	}
	t.Logf("median of %d runs: slurmd's prolog %s; the plugin's prolog %s; the prolog's end to the script's first line %s",
		runs, med(slurmd), med(ours), med(launch))
	names := make([]string, 0, len(stepMs))
	for n := range stepMs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		t.Logf("  step %s: %s", n, med(stepMs[n]))
	}
}
