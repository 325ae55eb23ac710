package inspect

import (
	"encoding/json"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// The Slurm phase spans and the cgroup readings as the supervisor sends them
// and the collector's file exporter writes them (helper/supervise's
// phases.go, queuewait.go and cgroupmetrics.go; OTLP JSON: ids in hex,
// 64-bit integers as strings). Times are ms after ns(0).

// phaseRes is a phase span's resource after the collector's identity
// transform.
func phaseRes(node string) string {
	return fmt.Sprintf(`{"attributes":[{"key":"service.name","value":{"stringValue":"slurm"}},{"key":"host.name","value":{"stringValue":%q}},`+
		`{"key":"slurm_job_id","value":{"stringValue":"42"}},{"key":"service.name.override","value":{"stringValue":"slurm"}},`+mark+`]}`, node)
}

// mark is the plugin's mark (contract.SourceKey), which the node's
// collector stamps on the supervisor's phase spans and cgroup readings only.
var mark = sAttr(contract.SourceKey, contract.SourceSlurm)

// plugRes is res with the plugin's mark: the cgroup readings' resource.
func plugRes(node, producer, instance string) string {
	r := res(node, producer, instance)
	return strings.TrimSuffix(r, "]}") + "," + mark + "]}"
}

// phase is one phase span from ms start to ms end; attrs are extra
// attributes, errMsg an error status, note a status message without error.
func phase(node, name, id, parent string, start, end int64, errMsg, note string, attrs ...string) string {
	st := "{}"
	switch {
	case errMsg != "":
		st = fmt.Sprintf(`{"message":%q,"code":2}`, errMsg)
	case note != "":
		st = fmt.Sprintf(`{"message":%q}`, note)
	}
	as := append([]string{fmt.Sprintf(`{"key":"slurm.node","value":{"stringValue":%q}}`, node)}, attrs...)
	return fmt.Sprintf(`{"traceId":"5c4b0f2a9d3e4c1b8a7f6e5d4c3b2a19","spanId":%q,"parentSpanId":%q,"name":%q,"kind":1,`+
		`"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[%s],"status":%s}`,
		id, parent, name, ns(0)+start*1e6, ns(0)+end*1e6, strings.Join(as, ","), st)
}

func phaseLine(node string, spans ...string) string {
	return fmt.Sprintf(`{"resourceSpans":[{"resource":%s,"scopeSpans":[{"scope":{"name":"gym-otel-spank/slurm-phases"},"spans":[%s]}]}]}`+"\n",
		phaseRes(node), strings.Join(spans, ","))
}

func sAttr(k, v string) string { return fmt.Sprintf(`{"key":%q,"value":{"stringValue":%q}}`, k, v) }
func iAttr(k string, v int) string {
	return fmt.Sprintf(`{"key":%q,"value":{"intValue":"%d"}}`, k, v)
}
func bAttr(k string, v bool) string { return fmt.Sprintf(`{"key":%q,"value":{"boolValue":%v}}`, k, v) }

// cgPoint is one point of the cgroup readings.
func cgPoint(name string, sum bool, ms int64, v float64, attrs ...string) string {
	dp := fmt.Sprintf(`{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","asDouble":%v}]`, strings.Join(attrs, ","), ns(0)+ms*1e6, v)
	if sum {
		return fmt.Sprintf(`{"name":%q,"sum":%s,"aggregationTemporality":2,"isMonotonic":true}}`, name, dp)
	}
	return fmt.Sprintf(`{"name":%q,"gauge":%s}}`, name, dp)
}

func cgLine(node string, ms ...string) string {
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":%s,"scopeMetrics":[{"metrics":[%s]}]}]}`+"\n", plugRes(node, "cgroup", "127.0.0.1:40000"), strings.Join(ms, ","))
}

const v1NoPSI = "cgroup v1 keeps no pressure (PSI is per cgroup on v2 only), and this group has no v2 directory"

// writePhaseJob writes a two-node job: on gn1 the queue wait (2 s), the
// prolog, the batch step with its script and final wait, steps 0 (exit 0)
// and 1 (exit 3), the extern step whose end was not seen, and two rollouts
// of Gym from 6.5 s on; on gn2 a prolog whose start was not handed on and
// a step cut at the drain. gn1's cgroups: the job's (v1: no pressure),
// step 0's and the collector's (v2, with pressure); gn2's job group is not
// there at the first scrape, then is.
func writePhaseJob(t *testing.T) string {
	t.Helper()
	job := t.TempDir()
	first := filepath.Join(job, "otel")
	second := filepath.Join(first, "nodes", "gn2")
	if err := os.MkdirAll(second, 0o755); err != nil {
		t.Fatal(err)
	}
	const root1, root2, batch = "1000000000000001", "2000000000000001", "1000000000000005"
	t1 := phaseLine("gn1",
		phase("gn1", vocab.SpanProlog, "1000000000000002", root1, 2300, 2800, "", "", bAttr(vocab.AttrStartKnown, true)),
		phase("gn1", vocab.SpanQueueWait, "1000000000000003", root1, 0, 2000, "", "", sAttr(vocab.AttrTimePrecision, "1s")),
		phase("gn1", vocab.SpanStep, "1000000000000004", root1, 2810, 12000, "the step's end was not seen on this node (the job was cancelled, timed out or lost the node): ended at the drain", "",
			sAttr(vocab.AttrStepID, "extern"), bAttr(vocab.AttrEndKnown, false)),
		phase("gn1", vocab.SpanStep, "1000000000000006", root1, 3500, 4500, "", "", sAttr(vocab.AttrStepID, "0"), bAttr(vocab.AttrEndKnown, true), iAttr(vocab.AttrStepTasks, 1), iAttr(vocab.AttrStepExitCode, 0)),
		phase("gn1", vocab.SpanStep, "1000000000000007", root1, 4600, 5700, "exit code 3", "", sAttr(vocab.AttrStepID, "1"), bAttr(vocab.AttrEndKnown, true), iAttr(vocab.AttrStepTasks, 1), iAttr(vocab.AttrStepExitCode, 3)))
	t1 += phaseLine("gn1",
		phase("gn1", vocab.SpanStep, batch, root1, 3000, 11000, "", "", sAttr(vocab.AttrStepID, "batch"), bAttr(vocab.AttrEndKnown, true), iAttr(vocab.AttrStepTasks, 1), iAttr(vocab.AttrStepExitCode, 0)),
		phase("gn1", vocab.SpanBatchScript, "1000000000000008", batch, 3000, 10000, "", "", bAttr(vocab.AttrEndKnown, true)),
		phase("gn1", vocab.SpanFinalWait, "1000000000000009", batch, 10000, 11000, "", ""),
		phase("gn1", vocab.SpanJob, root1, "", 0, 12000, "", "", sAttr(vocab.AttrJobID, "42"), bAttr(vocab.AttrStartKnown, true)))
	t1 += spanLine("gn1", sp("gym.rollout", "t1", 7, 300, "", ""), sp("gym.rollout", "t2", 8, 500, "", ""))
	t2 := phaseLine("gn2",
		phase("gn2", vocab.SpanProlog, "2000000000000002", root2, 2600, 2900, "", "the prolog's start was not handed on: the span starts at the supervisor's start", bAttr(vocab.AttrStartKnown, false)),
		phase("gn2", vocab.SpanStep, "2000000000000003", root2, 3600, 12100, "the step's end was not seen on this node (the job was cancelled, timed out or lost the node): ended at the drain", "",
			sAttr(vocab.AttrStepID, "0"), bAttr(vocab.AttrEndKnown, false)),
		phase("gn2", vocab.SpanJob, root2, "", 2600, 12100, "", "", sAttr(vocab.AttrJobID, "42"), bAttr(vocab.AttrStartKnown, false)))
	job1, step0, coll := sAttr("cgroup", "job"), []string{sAttr("cgroup", "step"), sAttr("step", "0")}, sAttr("cgroup", "collector")
	nk := func(group []string, fam, why string) string {
		return cgPoint(vocab.CgroupNotKept, false, 3000, 1, append(append([]string{}, group...), sAttr("family", fam), sAttr("reason", why))...)
	}
	var m1, m2 strings.Builder
	for i, at := range []int64{3000, 5000, 7000} {
		m1.WriteString(cgLine("gn1",
			cgPoint(vocab.CgroupCPUSeconds, true, at, 1.5*float64(i+1), job1),
			cgPoint(vocab.CgroupMemoryCurrent, false, at, float64(100+50*i)*(1<<20), job1),
			cgPoint(vocab.CgroupMemoryPeak, false, at, float64(150+50*i)*(1<<20), job1),
			cgPoint(vocab.CgroupMemoryLimit, false, at, 500*(1<<20), job1),
			cgPoint(vocab.CgroupOOMKills, true, at, 0, job1),
			cgPoint(vocab.CgroupCPUSeconds, true, at, 0.2*float64(i+1), coll),
			cgPoint(vocab.CgroupThrottledSeconds, true, at, 0.1*float64(i), coll),
			cgPoint(vocab.CgroupCPUPeriods, true, at, 100*float64(i), coll),
			cgPoint(vocab.CgroupThrottledPeriods, true, at, 5*float64(i), coll),
			cgPoint(vocab.CgroupCPUPressureSome, true, at, 1+0.5*float64(i), coll),
			cgPoint(vocab.CgroupCPUPressureFull, true, at, 0.5, coll),
			cgPoint(vocab.CgroupMemoryPressureSome, true, at, 0, coll),
			cgPoint(vocab.CgroupMemoryCurrent, false, at, 30*(1<<20), coll),
			nk([]string{job1}, "cpu_pressure", v1NoPSI), nk([]string{job1}, "memory_pressure", v1NoPSI), nk([]string{job1}, "io_pressure", v1NoPSI),
			nk([]string{coll}, "memory_peak", "memory.peak: not in this kernel (5.15.0; Linux 5.19 has it)")))
		if i < 2 {
			m1.WriteString(cgLine("gn1", cgPoint(vocab.CgroupCPUSeconds, true, at, 0.7*float64(i+1), step0...),
				cgPoint(vocab.CgroupMemoryPeak, false, at, 80*(1<<20), step0...)))
		}
	}
	m2.WriteString(cgLine("gn2", nk([]string{job1}, "all", "no Slurm cgroup of job 42 on this node yet")))
	m2.WriteString(cgLine("gn2", cgPoint(vocab.CgroupMemoryPeak, false, 6000, 300*(1<<20), job1), nk([]string{job1}, "cpu_usage", "cpuacct: no such group")))
	for path, data := range map[string]string{
		filepath.Join(first, "traces.jsonl"):   t1,
		filepath.Join(first, "metrics.jsonl"):  m1.String(),
		filepath.Join(second, "traces.jsonl"):  t2,
		filepath.Join(second, "metrics.jsonl"): m2.String(),
	} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return job
}

// TestPhases: each node's phases, in order, with what the node did not
// know marked so (no start, no end, no duration), and the step's exit
// codes; the phase spans are not ranked with the job's own spans.
func TestPhases(t *testing.T) {
	r, err := Build(writePhaseJob(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Phases) != 2 || r.Phases[0].Node != "gn1" || r.Phases[1].Node != "gn2" {
		t.Fatalf("phases %+v", r.Phases)
	}
	var got []string
	for _, p := range r.Phases[0].Phases {
		got = append(got, strings.TrimSpace(phaseLabel(p)))
	}
	if want := "job,queue wait,prolog,step extern,step batch,batch script,final wait,step 0,step 1"; strings.Join(got, ",") != want {
		t.Errorf("gn1 phases %s, want %s", strings.Join(got, ","), want)
	}
	np := r.Phases[0]
	if np.JobID != "42" || np.TraceID != "5c4b0f2a9d3e4c1b8a7f6e5d4c3b2a19" {
		t.Errorf("gn1 job %q trace %q", np.JobID, np.TraceID)
	}
	ext := np.find(phaseStep, "extern")
	if ext.End != nil || ext.Start == nil || ext.DurationSeconds.Known() || ext.SpanEnd.IsZero() || ext.Error == "" {
		t.Errorf("extern step %+v: want its end not known, the span's cut kept apart", ext)
	}
	s1 := np.find(phaseStep, "1")
	if s1.ExitCode == nil || *s1.ExitCode != 3 || !near(s1.DurationSeconds, 1.1) || s1.Error != "exit code 3" {
		t.Errorf("step 1 %+v", s1)
	}
	if q := np.find(phaseQueueWait, ""); q == nil || q.Precision != "1s" || !near(q.DurationSeconds, 2) {
		t.Errorf("queue wait %+v", q)
	}
	pr := r.Phases[1].find(phaseProlog, "")
	if pr.Start != nil || pr.End == nil || pr.DurationSeconds.Known() || pr.Note == "" {
		t.Errorf("gn2 prolog %+v: want its start not known", pr)
	}
	if j := r.Phases[1].find(phaseJob, ""); j.Start != nil {
		t.Errorf("gn2 job %+v: its start was the supervisor's", j)
	}
	for _, s := range r.Spans.ByName {
		if strings.HasPrefix(s.Name, "slurm.") {
			t.Errorf("phase span %s ranked with the job's spans", s.Name)
		}
	}
	if r.Spans.Total != 2 || r.Job.Producers["slurm"] != 12 {
		t.Errorf("spans %d (want the 2 rollouts), slurm items %d (want 12)", r.Spans.Total, r.Job.Producers["slurm"])
	}
}

// TestFirstRollout: submit to first rollout in parts that add up: the
// queue wait 2 s, start to prolog 0.3 s, the prolog 0.5 s, collector
// ready to batch script 0.2 s, batch script to the first rollout 4 s.
func TestFirstRollout(t *testing.T) {
	r, err := Build(writePhaseJob(t))
	if err != nil {
		t.Fatal(err)
	}
	fr := r.FirstRollout
	want := map[string]float64{"queue wait": 2, "start to prolog": 0.3, "prolog (collector start)": 0.5,
		"collector ready to batch script": 0.2, "batch script to first rollout": 4}
	if len(fr.Parts) != len(want) {
		t.Fatalf("parts %+v", fr.Parts)
	}
	sum := 0.0
	for _, p := range fr.Parts {
		if !near(p.Seconds, want[p.Name]) {
			t.Errorf("%s: %v s, want %v", p.Name, p.Seconds, want[p.Name])
		}
		sum += float64(p.Seconds)
	}
	if !near(fr.TotalSeconds, 7) || fr.TotalFrom != "submit" || math.Abs(sum-7) > 1e-9 || fr.Node != "gn1" || fr.RolloutNode != "gn1" || len(fr.Why) != 0 {
		t.Errorf("total %v from %q (parts sum %v), node %q rollout node %q, why %v", fr.TotalSeconds, fr.TotalFrom, sum, fr.Node, fr.RolloutNode, fr.Why)
	}
}

// TestFirstRolloutUnknown: without rollout spans and without the queue
// wait, the parts that need them are null and Why says so.
func TestFirstRolloutUnknown(t *testing.T) {
	job := writePhaseJob(t)
	tr := filepath.Join(job, "otel", "traces.jsonl")
	data, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.Contains(l, "gym.rollout") {
			keep = append(keep, strings.Replace(l, `"slurm.queue_wait"`, `"slurm.other"`, 1))
		}
	}
	if err := os.WriteFile(tr, []byte(strings.Join(keep, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	fr := r.FirstRollout
	if fr.TotalSeconds.Known() || fr.Parts[0].Seconds.Known() || fr.Parts[4].Seconds.Known() || !near(fr.Parts[2].Seconds, 0.5) || len(fr.Why) != 2 {
		t.Errorf("first rollout %+v", fr)
	}
}

// TestCgroups: per node and group the usage, the pressure's totals and
// shares, and what is not kept, never a 0 for it; a group not there at
// the first scrape but read later is not "not kept".
func TestCgroups(t *testing.T) {
	r, err := Build(writePhaseJob(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range r.Cgroups {
		got = append(got, u.Node+"/"+u.Group+u.Step)
	}
	if strings.Join(got, ",") != "gn1/job,gn1/step0,gn1/collector,gn2/job" {
		t.Fatalf("groups %v", got)
	}
	j, st, c, j2 := r.Cgroups[0], r.Cgroups[1], r.Cgroups[2], r.Cgroups[3]
	if !near(j.CPUSeconds, 4.5) || !near(j.MemoryPeakBytes, 250<<20) || !near(j.MemoryCurrentMaxBytes, 200<<20) || !near(j.MemoryLimitBytes, 500<<20) ||
		!near(j.OOMKills, 0) || j.Scrapes != 3 || j.CPUPressure.SomeSeconds.Known() || j.CPUThrottledSeconds.Known() {
		t.Errorf("gn1 job %+v", j)
	}
	if len(j.NotKept) != 3 || j.NotKept["memory_pressure"] != v1NoPSI {
		t.Errorf("gn1 job not kept %v", j.NotKept)
	}
	if !near(st.CPUSeconds, 1.4) || !near(st.MemoryPeakBytes, 80<<20) || st.Scrapes != 2 {
		t.Errorf("gn1 step 0 %+v", st)
	}
	// The collector's: cpu some 1 -> 2 s over 4 s: 25 %; full stays 0.5: 0 %.
	if p := c.CPUPressure; !near(p.SomeSeconds, 2) || !near(p.SomeShare, 0.25) || !near(p.FullSeconds, 0.5) || !near(p.FullShare, 0) || !near(p.WindowSeconds, 4) {
		t.Errorf("collector cpu pressure %+v", p)
	}
	if !near(c.MemoryPressure.SomeSeconds, 0) || c.IOPressure.SomeSeconds.Known() || !near(c.CPUThrottledSeconds, 0.2) || !near(c.CPUThrottledPeriods, 10) {
		t.Errorf("collector %+v", c)
	}
	if _, ok := c.NotKept["memory_peak"]; !ok || c.MemoryPeakBytes.Known() || !near(c.MemoryCurrentMaxBytes, 30<<20) {
		t.Errorf("collector memory peak %v, not kept %v", c.MemoryPeakBytes, c.NotKept)
	}
	if _, all := j2.NotKept["all"]; all || j2.NotKept["cpu_usage"] != "cpuacct: no such group" || !near(j2.MemoryPeakBytes, 300<<20) {
		t.Errorf("gn2 job %+v", j2)
	}
}

// TestPhasesText: the text shows the timeline per node from the submit,
// "?" where a time is not known, the submit to first rollout breakdown and
// the cgroups with "not kept", every line within Width.
func TestPhasesText(t *testing.T) {
	r, err := Build(writePhaseJob(t))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	t.Log("\n" + text)
	for _, want := range []string{
		"== Slurm phases (s since the submit, 2026-11-29 ",
		"    step extern           +2.810         ?          ?  end not seen (span cut at the drain, +12.000)",
		"    step 1                +4.600    +5.700    1.100 s  exit 3",
		"      final wait         +10.000   +11.000    1.000 s",
		"    prolog                     ?    +2.900          ?  to the collector's ready; start not handed on",
		"== submit to first rollout (batch node gn1)",
		"  queue wait                            2.000 s  (slurmctld's whole seconds)",
		"  batch script to first rollout         4.000 s",
		"  submit to first rollout               7.000 s",
		"  node group                CPU s throttled s memory peak       bound OOM kills\n" +
			"  gn1 job                    4.50           -   250.0 MiB   500.0 MiB         0\n" +
			"  gn1 step 0                 1.40           -    80.0 MiB        none         -\n" +
			"  gn1 collector              0.60        0.20  >=30.0 MiB        none         -\n" +
			"    pressure some/full (share of the time read): cpu 2.00/0.50 s (25.0%/0.0%), memory 0.00/- s\n",
		"  gn2 job                not kept           -   300.0 MiB        none         -\n" +
			"  not kept here, and why:\n" +
			"    cpu_pressure, io_pressure, memory_pressure of gn1 job:\n" +
			"      cgroup v1 keeps no pressure (PSI is per cgroup on v2 only), and this group has no v2 directory\n" +
			"    memory_peak of gn1 collector:\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q", want)
		}
	}
	for _, l := range strings.Split(text, "\n") {
		if len([]rune(l)) > Width {
			t.Errorf("line over %d columns: %q", Width, l)
		}
	}
}

// TestHTMLPhases: the page draws the phases as a timeline chart, a bar per
// phase, the ones not known in their own series, and has the tables.
func TestHTMLPhases(t *testing.T) {
	r, err := Build(writePhaseJob(t))
	if err != nil {
		t.Fatal(err)
	}
	facts := checkHTML(t, r, "chart-phases")
	if facts == nil {
		return // no Chart.js: said by checkHTML
	}
	for _, c := range facts {
		if c.ID != "chart-phases" {
			continue
		}
		// 12 phases: 7 known, 1 failed (step 1), 4 not known (gn1's extern
		// step; gn2's job, prolog and step); the first rollout's mark.
		n := 0
		for _, s := range c.Series {
			n += s.Points
		}
		if len(c.Series) != 4 || n != 13 || c.Series[1].Points != 1 || c.Series[2].Points != 4 || c.Series[3].Points != 1 || len(c.Y) != 13 {
			t.Errorf("phase chart series %+v", c.Series)
		}
	}
	b, err := os.ReadFile(filepath.Join(testenv.Root(), "build", "test-artifacts", t.Name(), "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, id := range []string{`id="phases"`, `id="firstrollout"`, `id="cgroups"`, `id="sum-firstrollout"`} {
		if !strings.Contains(html, id) {
			t.Errorf("page lacks %s", id)
		}
	}
}

// TestPhasesRequeued: a requeued job's second run writes its phases into
// the same dirs under a trace of its own: an entry of its own, and the
// submit to first rollout stays the first run's.
func TestPhasesRequeued(t *testing.T) {
	job := writePhaseJob(t)
	tr := filepath.Join(job, "otel", "traces.jsonl")
	data, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	var again []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.Contains(l, "slurm-phases") {
			l = strings.ReplaceAll(l, "5c4b0f2a9d3e4c1b8a7f6e5d4c3b2a19", "6d5c1f3b0e4f5d2c9b8a7f6e5d4c3b2a")
			l = strings.Replace(l, `{"key":"slurm_job_id","value":{"stringValue":"42"}}`,
				`{"key":"slurm_job_id","value":{"stringValue":"42"}},{"key":"slurm_job_restart_count","value":{"intValue":"1"}}`, 1)
			again = append(again, l)
		}
	}
	if err := os.WriteFile(tr, []byte(string(data)+strings.Join(again, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Phases) != 3 || r.Phases[0].TraceID == r.Phases[1].TraceID || r.Phases[1].Restart != "1" || r.Phases[1].Node != "gn1" ||
		len(r.Phases[1].Phases) != len(r.Phases[0].Phases) {
		t.Fatalf("phases %+v", r.Phases)
	}
	if fr := r.FirstRollout; !near(fr.TotalSeconds, 7) || !near(fr.Parts[0].Seconds, 2) {
		t.Errorf("first rollout %+v", fr)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "  gn1 (job 42) (restart 1)\n") {
		t.Errorf("the second run is not named:\n%s", b.String())
	}
}

// TestJobLookalikes: spans of the phase scope and cgroup_* points of
// producer "cgroup" without the plugin's mark (contract.SourceKey), as a
// task of the job can send them with the receiver token, are not Slurm's:
// the phases and the cgroups are the marked ones only, the unmarked spans
// are among the job's own spans, and the text and the JSON say how many
// looked like the plugin's but were sent by the job.
func TestJobLookalikes(t *testing.T) {
	dir := writePhaseJob(t)
	before, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	if before.JobLookalikes != (JobLookalikes{}) {
		t.Fatalf("lookalikes %+v in the plugin's own telling", before.JobLookalikes)
	}
	// What a task sends: the phase scope, the plugin's service name and
	// even the mark, which the node's collector deletes on the way in.
	unmarked := strings.Replace(phaseRes("gn1"), ","+mark, "", 1)
	forged := fmt.Sprintf(`{"resourceSpans":[{"resource":%s,"scopeSpans":[{"scope":{"name":"gym-otel-spank/slurm-phases"},"spans":[%s,%s]}]}]}`+"\n",
		unmarked,
		phase("gn1", vocab.SpanProlog, "f000000000000001", "1000000000000001", 0, 60000, "", ""),
		phase("gn1", vocab.SpanStep, "f000000000000002", "1000000000000001", 0, 90000, "", "", sAttr(vocab.AttrStepID, "7")))
	forgedCg := fmt.Sprintf(`{"resourceMetrics":[{"resource":%s,"scopeMetrics":[{"metrics":[%s,%s]}]}]}`+"\n",
		res("gn1", "cgroup", "127.0.0.1:40000"),
		cgPoint(mCgCPU, true, 1000, 9999, sAttr("cgroup", "job")),
		cgPoint(mCgMemPeak, false, 1000, 1<<40, sAttr("cgroup", "forged")))
	appendFile(t, filepath.Join(dir, "otel", "traces.jsonl"), forged)
	appendFile(t, filepath.Join(dir, "otel", "metrics.jsonl"), forgedCg)
	r, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.JobLookalikes.PhaseSpans != 2 || r.JobLookalikes.CgroupPoints != 2 {
		t.Errorf("lookalikes %+v, want 2 phase spans and 2 cgroup points", r.JobLookalikes)
	}
	if !equalJSON(t, r.Phases, before.Phases) || !equalJSON(t, r.Cgroups, before.Cgroups) {
		t.Errorf("the job's lookalikes changed the phases or the cgroups:\nphases %+v\ncgroups %+v", r.Phases, r.Cgroups)
	}
	var names []string
	for _, s := range r.Spans.ByName {
		if strings.HasPrefix(s.Name, "slurm.") {
			names = append(names, s.Name)
		}
	}
	if strings.Join(names, ",") != "slurm.step,slurm.prolog" || r.Spans.Total != before.Spans.Total+2 {
		t.Errorf("the job's spans: slurm.* names %v, total %d (%d before): want the 2 it sent among them", names, r.Spans.Total, before.Spans.Total)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(b.String()), " ")
	for _, want := range []string{
		"2 spans looked like the plugin's Slurm phases but were sent by the job and are not counted as Slurm's",
		"2 metric points looked like the plugin's cgroup series but were sent by the job and are not counted as the job's cgroups",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"job_lookalikes":{"phase_spans":2,"cgroup_points":2}`) {
		t.Errorf("JSON lacks job_lookalikes: %s", js)
	}
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(x) == string(y)
}

// TestStartupPartsSplitBatchToFirstRollout: Gym's start-up spans split
// "batch script to first rollout": the batch script's start to
// gym.startup's, each stage in order, and the start-up's end to the first
// rollout, each marked as within that part; the text indents them. No
// gym.startup span, no split.
func TestStartupPartsSplitBatchToFirstRollout(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s float64) *time.Time { x := t0.Add(time.Duration(s * float64(time.Second))); return &x }
	fr := FirstRollout{BatchStart: at(0), FirstRollout: at(100)}
	g := &GymStartup{Start: *at(2), End: *at(60), Seconds: 58, Stages: []StartupStage{
		{Name: "load_config", Start: *at(2), Seconds: 3}, {Name: "spawn_servers", Start: *at(5), Seconds: 5},
		{Name: "wait_for_model_endpoints", Start: *at(10), Seconds: 50}}}
	parts := startupParts(fr, g)
	want := []struct {
		name string
		s    float64
	}{{"batch script to Gym start-up", 2}, {"Gym start-up: load_config", 3}, {"Gym start-up: spawn_servers", 5},
		{"Gym start-up: wait_for_model_endpoints", 50}, {"Gym start-up to first rollout", 40}}
	if len(parts) != len(want) {
		t.Fatalf("parts %+v", parts)
	}
	for i, w := range want {
		if parts[i].Name != w.name || !near(parts[i].Seconds, w.s) || parts[i].Within != "batch script to first rollout" {
			t.Errorf("part %d: %+v, want %s %v within the batch script to first rollout", i, parts[i], w.name, w.s)
		}
	}
	if startupParts(fr, nil) != nil || startupParts(fr, &GymStartup{}) != nil {
		t.Error("a split without a gym.startup span")
	}
	fr.Parts = append([]TimePart{{Name: "batch script to first rollout", Seconds: 100}}, parts...)
	var b strings.Builder
	(&textOut{w: &b}).firstRolloutLines(fr)
	if !strings.Contains(b.String(), "\n    Gym start-up: spawn_servers ") || !strings.Contains(b.String(), "\n  batch script to first rollout ") {
		t.Errorf("text:\n%s", b.String())
	}
}
