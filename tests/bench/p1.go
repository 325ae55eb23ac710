package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// block is what one P1/P6 block of one configuration measured.
type block struct {
	plugin  bool
	srun    []float64 // srun true, a new job: seconds
	step    []float64 // srun true, a step in an allocation: seconds
	sbatch  []float64 // sbatch of an empty script to the job leaving the queue: seconds
	alloc   []float64 // the same jobs from their allocation (slurmctld log) on: seconds
	sbJobs  []sbJob
	stepd   memOf // the batch step's slurmstepd (KiB)
	stepd0  memOf // the job's srun step's slurmstepd (KiB)
	stepdOK bool
}

// sbJob is one empty batch job of P1: its id, submit and end times.
type sbJob struct {
	id          string
	submit, end time.Time
}

// timings runs `srun true` n times in one shell as the bench user and
// returns each wall time in seconds. prefix wraps the loop (e.g. salloc).
func timings(n int, wrap string) ([]float64, error) {
	loop := fmt.Sprintf(`srun -N1 true || exit 1; for i in $(seq %d); do s=$(date +%%s%%N); srun -N1 true || exit 1; e=$(date +%%s%%N); echo $((e-s)); done`, n)
	cmd := loop
	if wrap != "" {
		cmd = wrap + " bash -c '" + loop + "'"
	}
	out, err := asUser(cmd, false, 300*time.Second)
	if err != nil {
		return nil, err
	}
	var v []float64
	for _, f := range strings.Fields(out) {
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("timing %q in %q", f, out)
		}
		v = append(v, float64(ns)/1e9)
	}
	if len(v) != n {
		return nil, fmt.Errorf("got %d timings, want %d: %q", len(v), n, out)
	}
	return v, nil
}

// runBlock measures one block with the plugin installed or not.
func runBlock(plugin bool, n, nSbatch int) (block, error) {
	b := block{plugin: plugin}
	if err := usePlugin(plugin); err != nil {
		return b, err
	}
	if err := waitIdle(30 * time.Second); err != nil {
		return b, err
	}
	var err error
	// The first srun of each loop (a warm-up after the slurmd restart) is
	// not counted.
	if b.srun, err = timings(n, ""); err != nil {
		return b, err
	}
	if b.step, err = timings(n, "salloc -N1 --quiet"); err != nil {
		return b, err
	}
	if err := waitIdle(30 * time.Second); err != nil {
		return b, err
	}
	empty, err := writeScript("empty.sh", "")
	if err != nil {
		return b, err
	}
	for i := 0; i < nSbatch; i++ {
		t0 := time.Now()
		id, _, err := sbatch("-N1 -o /dev/null "+empty, false)
		if err != nil {
			return b, err
		}
		end, err := waitGone(id, 25*time.Millisecond, 60*time.Second)
		if err != nil {
			return b, err
		}
		b.sbatch = append(b.sbatch, secs(end.Sub(t0)))
		b.sbJobs = append(b.sbJobs, sbJob{id, t0, end})
	}
	// P6: the slurmstepd of a batch step and of an srun step, with the
	// flag on when the plugin is installed.
	if err := waitIdle(30 * time.Second); err != nil {
		return b, err
	}
	p6, err := writeScript("p6.sh", `srun -N1 sleep 5 &
sleep 1.5
touch `+jobsDir+`/p6.$SLURM_JOB_ID
wait
`)
	if err != nil {
		return b, err
	}
	flag := ""
	if plugin {
		flag = "--gym-otel "
	}
	id, _, err := sbatch("-N1 -o /dev/null "+flag+p6, plugin)
	if err != nil {
		return b, err
	}
	mark := filepath.Join(jobsDir, "p6."+id)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return b, fmt.Errorf("P6 job %s never started its step", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	batch := findProc("slurmstepd: [" + id + ".batch]")
	step := findProc("slurmstepd: [" + id + ".0]")
	if len(batch) == 1 && len(step) == 1 {
		b.stepd, err = readMem(batch[0])
		if err == nil {
			b.stepd0, err = readMem(step[0])
		}
		b.stepdOK = err == nil
	}
	if !b.stepdOK {
		logf("P6: job %s: slurmstepd not found (batch %v, step %v)", id, batch, step)
	}
	if _, err := waitGone(id, 200*time.Millisecond, 60*time.Second); err != nil {
		return b, err
	}
	return b, nil
}

// runP1 runs rounds of three blocks, plugin / none / plugin again (the
// A-against-A control), and returns the rows of P1 and P6.
func runP1(rounds, n, nSbatch int) ([]Row, error) {
	type round struct{ a, b, a2 block }
	var rs []round
	for r := 0; r < rounds; r++ {
		var rd round
		var err error
		logf("P1/P6 round %d/%d: plugin", r+1, rounds)
		if rd.a, err = runBlock(true, n, nSbatch); err != nil {
			return nil, err
		}
		logf("P1/P6 round %d/%d: no plugin", r+1, rounds)
		if rd.b, err = runBlock(false, n, nSbatch); err != nil {
			return nil, err
		}
		logf("P1/P6 round %d/%d: plugin (control)", r+1, rounds)
		if rd.a2, err = runBlock(true, n, nSbatch); err != nil {
			return nil, err
		}
		rs = append(rs, rd)
		logf("P1 round %d: srun %.0f/%.0f/%.0f ms, step %.0f/%.0f/%.0f ms, sbatch %.0f/%.0f/%.0f ms (plugin/none/plugin)", r+1,
			1000*median(rd.a.srun), 1000*median(rd.b.srun), 1000*median(rd.a2.srun),
			1000*median(rd.a.step), 1000*median(rd.b.step), 1000*median(rd.a2.step),
			1000*median(rd.a.sbatch), 1000*median(rd.b.sbatch), 1000*median(rd.a2.sbatch))
	}
	if err := usePlugin(true); err != nil {
		return nil, err
	}
	// slurmctld allocates a batch job at its next scheduler pass, up to
	// about 1 s after the submission whatever the plugin does: the time
	// from the allocation on is the part the plugin can change.
	alloc := allocTimes()
	for i := range rs {
		for _, b := range []*block{&rs[i].a, &rs[i].b, &rs[i].a2} {
			for _, j := range b.sbJobs {
				if t, ok := alloc[j.id]; ok {
					b.alloc = append(b.alloc, secs(j.end.Sub(t)))
				}
			}
		}
	}
	var rows []Row
	kinds := []struct {
		what string
		get  func(block) []float64
	}{
		{"srun true, a new job: plugin installed, flag unused / no plugin", func(b block) []float64 { return b.srun }},
		{"srun true, a step in an allocation: plugin / no plugin", func(b block) []float64 { return b.step }},
		{"sbatch of an empty script, submit to the job's end: plugin / no plugin", func(b block) []float64 { return b.sbatch }},
		{"the same, from the job's allocation to its end: plugin / no plugin", func(b block) []float64 { return b.alloc }},
	}
	for _, k := range kinds {
		var plug, none, a, a2, ratios, ctl []float64
		for _, rd := range rs {
			ra, rb, ra2 := k.get(rd.a), k.get(rd.b), k.get(rd.a2)
			plug = append(append(plug, ra...), ra2...)
			none = append(none, rb...)
			a, a2 = append(a, ra...), append(a2, ra2...)
			ratios = append(ratios, median(append(append([]float64(nil), ra...), ra2...))/median(rb))
			ctl = append(ctl, median(ra2)/median(ra))
		}
		ratio := median(plug) / median(none)
		lo, hi := minmax(ratios)
		clo, chi := minmax(ctl)
		rows = append(rows, Row{
			ID: "P1", What: k.what,
			Figure: fmt.Sprintf("%.3f (%.0f / %.0f ms)", ratio, 1000*median(plug), 1000*median(none)),
			Spread: fmt.Sprintf("rounds %.3f-%.3f; A/A %.3f (%.3f-%.3f)", lo, hi, median(a2)/median(a), clo, chi),
			Target: "<= 1.01", Met: yes(ratio <= 1.01),
		})
	}
	// P6: flag on (plugin blocks) against no plugin.
	for _, s := range []struct {
		what string
		get  func(block) memOf
	}{
		{"slurmstepd RSS added, batch step, flag on / no plugin", func(b block) memOf { return b.stepd }},
		{"slurmstepd RSS added, srun step, flag on / no plugin", func(b block) memOf { return b.stepd0 }},
	} {
		var on, off, onA, onA2, pssOn, pssOff, diffs []float64
		for _, rd := range rs {
			if !rd.a.stepdOK || !rd.b.stepdOK || !rd.a2.stepdOK {
				continue
			}
			ma, mb, ma2 := s.get(rd.a), s.get(rd.b), s.get(rd.a2)
			on = append(on, ma.RSS, ma2.RSS)
			off = append(off, mb.RSS)
			onA, onA2 = append(onA, ma.RSS), append(onA2, ma2.RSS)
			pssOn, pssOff = append(pssOn, ma.PSS, ma2.PSS), append(pssOff, mb.PSS)
			diffs = append(diffs, (ma.RSS+ma2.RSS)/2-mb.RSS)
		}
		if len(on) == 0 {
			rows = append(rows, Row{ID: "P6", What: s.what, Figure: "no sample", Target: "<= 10 MiB", Met: "?"})
			continue
		}
		d := (median(on) - median(off)) / 1024
		lo, hi := minmax(diffs)
		rows = append(rows, Row{
			ID: "P6", What: s.what,
			Figure: fmt.Sprintf("%+.2f MiB (RSS %.1f / %.1f MiB; PSS %+.2f MiB)", d, median(on)/1024, median(off)/1024,
				(median(pssOn)-median(pssOff))/1024),
			Spread: fmt.Sprintf("rounds %+.2f..%+.2f MiB; A/A %+.2f MiB", lo/1024, hi/1024, (median(onA2)-median(onA))/1024),
			Target: "<= 10 MiB", Met: yes(d <= 10),
		})
	}
	return rows, nil
}

func yes(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
