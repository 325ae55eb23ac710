package inspect

import (
	"compress/gzip"
	"encoding/json"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

var updateSlurmRuns = flag.Bool("update-slurm-runs", false, "rewrite the golden files of testdata/slurmrun")

// slurmRun unpacks testdata/slurmrun/<name>/otel (the job's otel/ dir as
// the plugin's collectors wrote it on real Slurm, its jsonl files gzipped)
// into a temporary job dir and builds its report; the temporary otel/ dir
// is returned for the goldens to hide.
func slurmRun(t *testing.T, name string) (*Report, string) {
	t.Helper()
	src := filepath.Join("testdata", "slurmrun", name, "otel")
	job := t.TempDir()
	otel := filepath.Join(job, "otel")
	err := filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(otel, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		var r io.Reader = in
		if strings.HasSuffix(path, ".gz") {
			zr, err := gzip.NewReader(in)
			if err != nil {
				return err
			}
			r, to = zr, strings.TrimSuffix(to, ".gz")
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, 0o644)
	})
	if err != nil {
		t.Fatalf("%v (testdata/slurmrun/README.md says how it was made)", err)
	}
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	return r, otel
}

// slurmRunGolden compares the phase, first-rollout and cgroup sections of
// the report (text and JSON) with testdata/slurmrun/<name>/golden.{txt,json}.
func slurmRunGolden(t *testing.T, name string, r *Report, otel string) {
	t.Helper()
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(text.String(), "\n") {
		if len([]rune(l)) > Width {
			t.Errorf("line over %d columns: %q", Width, l)
		}
	}
	js, err := json.MarshalIndent(struct {
		Phases       []NodePhases  `json:"phases"`
		FirstRollout FirstRollout  `json:"first_rollout"`
		Cgroups      []CgroupUsage `json:"cgroups"`
	}{r.Phases, r.FirstRollout, r.Cgroups}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	shown := "/jobs/" + name + "/otel"
	for file, got := range map[string]string{
		"golden.txt":  textSections(text.String(), "Slurm phases", "submit to first rollout", "cgroups"),
		"golden.json": string(js) + "\n",
	} {
		got = strings.ReplaceAll(got, otel, shown)
		path := filepath.Join("testdata", "slurmrun", name, file)
		if *updateSlurmRuns {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -run %s -update-slurm-runs writes it)", err, t.Name())
		}
		if string(want) != got {
			t.Errorf("%s differs (go test -update-slurm-runs rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
		}
	}
}

// TestSlurmRunGym: a two-node job of the plugin's tests on real Slurm
// (tests/plugin TestInspectReport: vLLM and dcgm stand-ins, node_exporter,
// the Gym stand-in's 8 rollouts; no cgroup plugin in slurm.conf). Each
// node's phases lie inside its job span with every time known; the first
// node has the queue wait and the batch step with its script and final
// wait; the parts from the submit to the first rollout are all known and
// add up to the total; the cgroups are the collector's own on each node,
// and Slurm's job group is said to be not kept (there is none).
func TestSlurmRunGym(t *testing.T) {
	r, otel := slurmRun(t, "gym-two-nodes")
	checkSlurmRunPhases(t, r, 2)
	fr := r.FirstRollout
	sum := 0.0
	for _, p := range fr.Parts {
		if !p.Seconds.Known() || p.Seconds < -1 {
			t.Errorf("part %s: %v s", p.Name, p.Seconds)
		}
		sum += float64(p.Seconds)
	}
	if !fr.TotalSeconds.Known() || fr.TotalFrom != "submit" || math.Abs(sum-float64(fr.TotalSeconds)) > 1e-6 || len(fr.Why) != 0 {
		t.Errorf("submit to first rollout %v from %q, parts sum to %v, why %v", fr.TotalSeconds, fr.TotalFrom, sum, fr.Why)
	}
	if q := fr.Parts[0].Seconds; q != Value(math.Trunc(float64(q))) {
		t.Errorf("queue wait %v s: slurmctld's times are whole seconds", q)
	}
	if fr.FirstRollout == nil || fr.BatchStart == nil || fr.FirstRollout.Before(*fr.BatchStart) || r.Gym.RolloutSpans.Count != 8 {
		t.Errorf("first rollout %v, batch start %v, rollouts %v", fr.FirstRollout, fr.BatchStart, r.Gym.RolloutSpans.Count)
	}
	for _, node := range []string{"gn1", "gn2"} {
		var job, coll *CgroupUsage
		for i := range r.Cgroups {
			if u := &r.Cgroups[i]; u.Node == node && u.Group == "job" {
				job = u
			} else if u.Node == node && u.Group == "collector" {
				coll = u
			}
		}
		if coll == nil || !coll.CPUSeconds.Known() || coll.CPUSeconds <= 0 || coll.Scrapes < 3 {
			t.Errorf("%s: the collector's group %+v", node, coll)
		}
		if job == nil || job.NotKept["all"] == "" || job.CPUSeconds.Known() {
			t.Errorf("%s: Slurm's job group %+v: want it not kept (no cgroup plugin)", node, job)
		}
	}
	slurmRunGolden(t, "gym-two-nodes", r, otel)
}

// TestSlurmRunCgroupV1: a two-node job on Slurm's cgroup/v1 plugins
// (tests/plugin TestCgroupMetrics): the step on gn2 held 200 MiB, the
// batch step on gn1 spun 2 s of CPU. gn2's job and step 0 peaks are 200
// MiB or more, gn1's stay below; gn1's job and batch step used about 2 s
// of CPU; pressure and throttling are not kept on v1, with the reason,
// and the collector's own group (v2 here) has its pressure.
func TestSlurmRunCgroupV1(t *testing.T) {
	r, otel := slurmRun(t, "cgroup-v1")
	checkSlurmRunPhases(t, r, 2)
	get := func(node, group, step string) CgroupUsage {
		for _, u := range r.Cgroups {
			if u.Node == node && u.Group == group && u.Step == step {
				return u
			}
		}
		t.Fatalf("no %s %s %s group in %+v", node, group, step, r.Cgroups)
		return CgroupUsage{}
	}
	const mib = 1 << 20
	if j, s := get("gn2", "job", ""), get("gn2", "step", "0"); j.MemoryPeakBytes < 200*mib || s.MemoryPeakBytes < 200*mib {
		t.Errorf("gn2 peaks: job %v, step 0 %v: want >= 200 MiB", j.MemoryPeakBytes, s.MemoryPeakBytes)
	}
	if j := get("gn1", "job", ""); j.MemoryPeakBytes >= 200*mib || j.CPUSeconds < 1.5 || j.OOMKills != 0 {
		t.Errorf("gn1 job %+v", j)
	}
	if b := get("gn1", "step", "batch"); b.CPUSeconds < 1.5 {
		t.Errorf("gn1 batch step CPU %v s, want about 2", b.CPUSeconds)
	}
	for _, u := range r.Cgroups {
		if u.Group == "collector" {
			if !u.CPUPressure.SomeSeconds.Known() {
				t.Errorf("%s collector: no cpu pressure", u.Node)
			}
			continue
		}
		if !strings.Contains(u.NotKept["memory_pressure"], "cgroup v1 keeps no pressure") || u.MemoryPressure.SomeSeconds.Known() ||
			u.NotKept["cpu_throttling"] == "" || u.CPUThrottledSeconds.Known() {
			t.Errorf("%s %s %s: pressure %+v, not kept %v", u.Node, u.Group, u.Step, u.MemoryPressure, u.NotKept)
		}
	}
	slurmRunGolden(t, "cgroup-v1", r, otel)
}

// TestSlurmRunCancelled: a one-node job cancelled during its step
// (tests/plugin TestPhaseSpansCancelled): the steps' spans say the signal
// (the node saw their ends), the script has no final wait, nothing
// claims a first rollout; the epilog and the drain (appended by the
// supervisor after the collector's exit) are in the timeline, the epilog
// starting first, its end not known, the drain's known.
func TestSlurmRunCancelled(t *testing.T) {
	r, otel := slurmRun(t, "cancelled")
	if len(r.Phases) != 1 {
		t.Fatalf("phases %+v", r.Phases)
	}
	np := r.Phases[0]
	for _, step := range []string{"batch", "0"} {
		p := np.find(phaseStep, step)
		if p == nil || p.Signal == nil || *p.Signal != 15 || p.Error == "" || p.End == nil || !p.DurationSeconds.Known() {
			t.Errorf("step %s of the cancelled job: %+v", step, p)
		}
	}
	if np.find(phaseFinalWait, "") != nil {
		t.Error("a final wait for a script the signal killed")
	}
	ep, dr := np.find(phaseEpilog, ""), np.find(phaseDrain, "")
	if ep == nil || dr == nil || ep.Start == nil || ep.End != nil || ep.DurationSeconds.Known() || dr.Start == nil || dr.End == nil ||
		ep.Start.After(*dr.Start) || phaseLabel(*ep) != "epilog" || phaseLabel(*dr) != "drain" {
		t.Errorf("epilog %+v, drain %+v: want both, the epilog first with its end not known", ep, dr)
	}
	if fr := r.FirstRollout; fr.TotalSeconds.Known() || fr.FirstRollout != nil || fr.Parts[4].Seconds.Known() || !fr.Parts[0].Seconds.Known() {
		t.Errorf("first rollout %+v", fr)
	}
	slurmRunGolden(t, "cancelled", r, otel)
}

// checkSlurmRunPhases: every node's phases inside its job span, every time
// known (the job ended normally), the first node with the queue wait, the
// batch step and its two parts, exit codes 0.
func checkSlurmRunPhases(t *testing.T, r *Report, nodes int) {
	t.Helper()
	if len(r.Phases) != nodes {
		t.Fatalf("%d nodes with phases, want %d", len(r.Phases), nodes)
	}
	for _, np := range r.Phases {
		job := np.find(phaseJob, "")
		if job == nil || np.TraceID != r.Phases[0].TraceID {
			t.Fatalf("%s: no job span, or trace %s not the run's %s", np.Node, np.TraceID, r.Phases[0].TraceID)
		}
		for _, p := range np.Phases {
			if p.Start == nil || p.End == nil || !p.DurationSeconds.Known() || p.Error != "" {
				t.Errorf("%s %s %s: start %v end %v error %q", np.Node, p.Name, p.Step, p.Start, p.End, p.Error)
				continue
			}
			if p.Start.Before(*job.Start) || p.End.After(*job.End) {
				t.Errorf("%s %s %s outside the job span", np.Node, p.Name, p.Step)
			}
			if p.Name == phaseStep && p.Step != "extern" && (p.ExitCode == nil || *p.ExitCode != 0) {
				t.Errorf("%s step %s exit %v", np.Node, p.Step, p.ExitCode)
			}
		}
	}
	first := r.Phases[0]
	for _, n := range []string{phaseQueueWait, phaseProlog, phaseBatch, phaseFinalWait} {
		if first.find(n, "") == nil {
			t.Errorf("%s: no %s", first.Node, n)
		}
	}
	for _, s := range r.Spans.ByName {
		if strings.HasPrefix(s.Name, "slurm.") {
			t.Errorf("phase span %s ranked with the job's spans", s.Name)
		}
	}
}

// TestSlurmRunHTML: the real runs' pages in Chromium draw the phase
// timeline with a bar per phase (every time known: the phases, and the
// cancelled job's failed ones and its epilog, whose end is not known, in
// series of their own) and, for the run
// with rollouts, the first rollout's mark; the tables are there.
func TestSlurmRunHTML(t *testing.T) {
	for _, c := range []struct {
		name   string
		series int
	}{{"gym-two-nodes", 2}, {"cgroup-v1", 1}, {"cancelled", 3}} {
		t.Run(c.name, func(t *testing.T) {
			r, _ := slurmRun(t, c.name)
			html, page := writeReportPage(t, r)
			if html == "" {
				return
			}
			for _, id := range []string{`id="phases"`, `id="firstrollout"`, `id="cgroups"`, `id="sum-firstrollout"`} {
				if !strings.Contains(html, id) {
					t.Errorf("page lacks %s", id)
				}
			}
			testenv.CheckPage(t, page, filepath.Join(filepath.Dir(page), "report.png"), "chart-phases")
			var facts []chartFacts
			if err := json.Unmarshal([]byte(testenv.EvalPage(t, page, "chart-facts")), &facts); err != nil {
				t.Fatal(err)
			}
			phases := 0
			for _, np := range r.Phases {
				phases += len(np.Phases)
			}
			found := false
			for _, f := range facts {
				if f.ID != "chart-phases" {
					continue
				}
				found = true
				drawn, points := 0, 0
				for _, s := range f.Series {
					drawn += s.Drawn
					points += s.Points
				}
				marks := 0
				if r.FirstRollout.FirstRollout != nil {
					marks = 1
				}
				if len(f.Series) != c.series || points != phases+marks || drawn != points || len(f.Y) != phases+marks {
					t.Errorf("phase chart %+v: want %d series, %d phases drawn", f, c.series, phases)
				}
			}
			if !found {
				t.Errorf("no phase chart among %+v", facts)
			}
		})
	}
}
