package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// loadResult is the part of loadgen's per-step summary the bench reads.
type loadResult struct {
	Tag         string  `json:"tag"`
	Rate        int     `json:"target_rate"`
	Seconds     float64 `json:"seconds"`
	SentSpans   int64   `json:"sent_spans"`
	OKSpans     int64   `json:"ok_spans"`
	FailedSpans int64   `json:"failed_spans"`
	Achieved    float64 `json:"achieved_rate"`
	LateBatches int64   `json:"late_batches"`
	FirstError  string  `json:"first_error"`
}

// loadRun is one P4/P5 job: a collector idle, then one rate for dur.
type loadRun struct {
	rate              int
	res               loadResult
	inFile, inBackend int64
	idle              []memOf // samples while idle
	load              []memOf // samples under load
	pass              bool
}

// lost returns the spans missing from the job's traces.jsonl and from the
// backend, counting refused requests as lost.
func (r loadRun) lost() (int64, int64) {
	return r.res.SentSpans - r.inFile, r.res.SentSpans - r.inBackend
}

// runLoad runs one --gym-otel job on one node: idle for idle, then loadgen
// at rate spans/s for dur; the bench samples the collector's memory.
func runLoad(rate int, dur, idle time.Duration) (loadRun, error) {
	lr := loadRun{rate: rate}
	if err := waitIdle(60 * time.Second); err != nil {
		return lr, err
	}
	tag := "p5-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	out := filepath.Join(jobsDir, tag+".json")
	script, err := writeScript("p5.sh", fmt.Sprintf(`touch %[1]s/p5.$SLURM_JOB_ID
sleep %[2]d
exec %[3]s/loadgen --steps "$1" --tag "$2" --out "$3" --pause 0s --workers 4 --batch 200 >/dev/null
`, jobsDir, int(idle.Seconds()), installDir))
	if err != nil {
		return lr, err
	}
	id, _, err := sbatch(fmt.Sprintf("-N1 -o %s/%s.out --gym-otel %s %d:%s %s %s", jobsDir, tag, script, rate, dur, tag, out), true)
	if err != nil {
		return lr, err
	}
	mark := filepath.Join(jobsDir, "p5."+id)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return lr, fmt.Errorf("P5 job %s never started", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	started := time.Now()
	jobOut := jobOtelDir(id)
	col := findCollector(installDir, jobOut)
	if len(col) != 1 {
		return lr, fmt.Errorf("P5 job %s: collector processes %v", id, col)
	}
	// Idle: the last 4 s before the load starts, every 0.5 s.
	time.Sleep(time.Until(started.Add(idle - 4*time.Second)))
	for time.Since(started) < idle-500*time.Millisecond {
		if m, err := readMem(col[0]); err == nil {
			lr.idle = append(lr.idle, m)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Under load: every second until the load ends.
	time.Sleep(time.Until(started.Add(idle + 2*time.Second)))
	for time.Since(started) < idle+dur {
		m, err := readMem(col[0])
		if err != nil {
			break
		}
		lr.load = append(lr.load, m)
		time.Sleep(time.Second)
	}
	if _, err := waitGone(id, 200*time.Millisecond, dur+120*time.Second); err != nil {
		return lr, err
	}
	time.Sleep(2 * time.Second) // the backend's file exporter flushes every 100 ms
	data, err := os.ReadFile(out)
	if err != nil {
		return lr, fmt.Errorf("P5 job %s: no loadgen summary: %v", id, err)
	}
	var res []loadResult
	if err := json.Unmarshal(data, &res); err != nil || len(res) != 1 {
		return lr, fmt.Errorf("P5 job %s: summary %q: %v", id, data, err)
	}
	lr.res = res[0]
	pat := []byte(`"stringValue":"` + res[0].Tag + `"`)
	if lr.inFile, err = countIn(filepath.Join(jobOut, "traces.jsonl"), pat); err != nil {
		return lr, err
	}
	if lr.inBackend, err = countIn(filepath.Join(backendDir, "traces.jsonl"), pat); err != nil {
		return lr, err
	}
	lf, lb := lr.lost()
	want := int64(float64(rate) * dur.Seconds())
	kept := lr.res.Seconds <= dur.Seconds()*1.05
	lr.pass = lr.res.FailedSpans == 0 && lr.res.SentSpans == want && lf == 0 && lb == 0 && kept
	logf("P5 job %s: %d spans/s for %v: sent %d, refused %d, in traces.jsonl %d, at the backend %d, %.1f s (%.0f/s), late batches %d: pass %v %s",
		id, rate, dur, lr.res.SentSpans, lr.res.FailedSpans, lr.inFile, lr.inBackend, lr.res.Seconds, lr.res.Achieved, lr.res.LateBatches, lr.pass, lr.res.FirstError)
	// The files of a fast run are large: keep the summary, drop the jsonl.
	_ = os.RemoveAll(filepath.Join(jobsDir, "gym-otel-"+id))
	return lr, nil
}

// idleRow is P4's row of the collector of a job without a scrape target,
// idle: samples are its memory in the last seconds of its idle phase.
func idleRow(samples []memOf) Row {
	var pss, rss []float64
	for _, m := range samples {
		pss, rss = append(pss, m.PSS/1024), append(rss, m.RSS/1024)
	}
	fig, p, a := p4Figure(samples)
	lo, hi := minmax(pss)
	return Row{
		ID: "P4", What: "collector memory per node, idle, no scrape target (PSS, RssAnon; the plugin's group, VmRSS, RssFile)",
		Figure: fig,
		Spread: fmt.Sprintf("PSS %.1f-%.1f MiB over %d samples; VmRSS median %.1f MiB (<= 80, issue 29: %s)", lo, hi, len(pss),
			median(rss), yes(median(rss) <= 80)),
		Target: p4Target, Met: p4Met(p, a),
	}
}

// runP4Idle is P4's two idle rows alone (GYM_OTEL_BENCH_ONLY=P4I): the
// scraping job (runIdleScrape, sampled for scrapeWin), then one job
// without a scrape target idle for idle, sampled in its last 4 s (as
// runP45's first job, without the P5 load after it).
func runP4Idle(idle, scrapeWin time.Duration) ([]Row, error) {
	if err := usePlugin(true); err != nil {
		return nil, err
	}
	scraping, err := runIdleScrape(4*scrapeInterval*time.Second, scrapeWin)
	if err != nil {
		return nil, err
	}
	if err := waitIdle(60 * time.Second); err != nil {
		return nil, err
	}
	tag := "p4i-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	script, err := writeScript("p4i.sh", fmt.Sprintf("touch %s/p4i.$SLURM_JOB_ID\nsleep %d\n", jobsDir, int(idle.Seconds())+1))
	if err != nil {
		return nil, err
	}
	id, _, err := sbatch(fmt.Sprintf("-N1 -o %s/%s.out --gym-otel %s", jobsDir, tag, script), true)
	if err != nil {
		return nil, err
	}
	mark := filepath.Join(jobsDir, "p4i."+id)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("P4 idle job %s never started", id)
		}
	}
	started := time.Now()
	col := findCollector(installDir, jobOtelDir(id))
	if len(col) != 1 {
		return nil, fmt.Errorf("P4 idle job %s: collector processes %v", id, col)
	}
	var samples []memOf
	time.Sleep(time.Until(started.Add(idle - 4*time.Second)))
	for time.Since(started) < idle-500*time.Millisecond {
		if m, err := readMem(col[0]); err == nil {
			samples = append(samples, m)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if _, err := waitGone(id, 200*time.Millisecond, 120*time.Second); err != nil {
		return nil, err
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("P4 idle job %s: no sample of its collector", id)
	}
	return []Row{idleRow(samples), scraping}, nil
}

// runP45 first runs P4's scraping idle job (runIdleScrape, sampled for
// scrapeWin), then climbs from 10,000 spans/s (doubling while nothing is
// lost, halving while something is) for at most `jobs` jobs; the first
// job's idle phase gives P4's idle figure without a scrape target, the
// highest passing rate P5's figure and P4's loaded figure.
func runP45(dur, idle, scrapeWin time.Duration, jobs int) ([]Row, error) {
	if err := usePlugin(true); err != nil {
		return nil, err
	}
	// At least 3 scrape intervals before the first sample.
	scraping, err := runIdleScrape(4*scrapeInterval*time.Second, scrapeWin)
	if err != nil {
		return nil, err
	}
	var runs []loadRun
	rate := 10000
	var best, failAbove *loadRun
	for i := 0; i < jobs; i++ {
		d := idle
		if i > 0 {
			d = 6 * time.Second
		}
		lr, err := runLoad(rate, dur, d)
		if err != nil {
			return nil, err
		}
		runs = append(runs, lr)
		cur := &runs[len(runs)-1]
		if lr.pass {
			if best == nil || lr.rate > best.rate {
				best = cur
			}
			if failAbove != nil {
				break
			}
			rate *= 2
		} else {
			if failAbove == nil || lr.rate < failAbove.rate {
				failAbove = cur
			}
			if best != nil {
				break
			}
			rate /= 2
		}
	}
	first := runs[0]
	mib := func(kib float64) float64 { return kib / 1024 }
	pick := func(ms []memOf, f func(memOf) float64) []float64 {
		var v []float64
		for _, m := range ms {
			v = append(v, f(m))
		}
		return v
	}
	rows := []Row{idleRow(first.idle), scraping}
	loaded := best
	if loaded == nil {
		loaded = &runs[len(runs)-1]
	}
	lrss := pick(loaded.load, func(m memOf) float64 { return m.RSS })
	llo, lhi := minmax(lrss)
	rows = append(rows, Row{
		ID: "P4", What: fmt.Sprintf("collector memory under load (%d spans/s; memory_limit_mib 512, GOMEMLIMIT 409 MiB)", loaded.rate),
		Figure: fmt.Sprintf("%.1f MiB median, %.1f MiB peak (anon %.1f MiB median)", mib(median(lrss)), mib(lhi),
			mib(median(pick(loaded.load, func(m memOf) float64 { return m.Anon })))),
		Spread: fmt.Sprintf("RSS %.1f-%.1f MiB over %d samples", mib(llo), mib(lhi), len(lrss)),
		Target: "report", Met: "-",
	})
	fig, spread := "none passed", ""
	if best != nil {
		fig = fmt.Sprintf("%d spans/s (%.0f/s achieved, 0 lost in %d)", best.rate, best.res.Achieved, best.res.SentSpans)
	}
	if failAbove != nil {
		lf, lb := failAbove.lost()
		spread = fmt.Sprintf("%d/s: refused %d, lost %d (file) %d (backend), %.0f/s achieved", failAbove.rate,
			failAbove.res.FailedSpans, lf, lb, failAbove.res.Achieved)
	} else {
		spread = fmt.Sprintf("no loss up to the highest rate tried (%d/s)", best.rate)
	}
	rows = append(rows, Row{
		ID: "P5", What: fmt.Sprintf("spans/s per node into traces.jsonl and the backend, 0 lost, %v per rate", dur),
		Figure: fig, Spread: spread, Target: ">= 10000", Met: yes(best != nil && best.rate >= 10000),
	})
	return rows, nil
}
