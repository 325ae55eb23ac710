package plugin_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cgPoint is one point of a cgroup_* metric in a node's metrics.jsonl,
// with the resource attributes and the point's labels.
type cgPoint struct {
	res, attrs map[string]string
	at         time.Time
	value      float64
}

// cgroupPoints reads the points of metric name (gauge or sum) from path.
func cgroupPoints(t *testing.T, path, name string) []cgPoint {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type kv struct {
		Key   string `json:"key"`
		Value struct {
			S string `json:"stringValue"`
		} `json:"value"`
	}
	type dp struct {
		Attributes []kv     `json:"attributes"`
		Time       string   `json:"timeUnixNano"`
		AsDouble   *float64 `json:"asDouble"`
		AsInt      *string  `json:"asInt"`
	}
	attrs := func(kvs []kv) map[string]string {
		m := map[string]string{}
		for _, a := range kvs {
			m[a.Key] = a.Value.S
		}
		return m
	}
	var out []cgPoint
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		var l struct {
			ResourceMetrics []struct {
				Resource struct {
					Attributes []kv `json:"attributes"`
				} `json:"resource"`
				ScopeMetrics []struct {
					Metrics []struct {
						Name  string `json:"name"`
						Gauge *struct {
							DataPoints []dp `json:"dataPoints"`
						} `json:"gauge"`
						Sum *struct {
							DataPoints []dp `json:"dataPoints"`
						} `json:"sum"`
					} `json:"metrics"`
				} `json:"scopeMetrics"`
			} `json:"resourceMetrics"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		for _, rm := range l.ResourceMetrics {
			res := attrs(rm.Resource.Attributes)
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name != name {
						continue
					}
					var dps []dp
					if m.Gauge != nil {
						dps = m.Gauge.DataPoints
					} else if m.Sum != nil {
						dps = m.Sum.DataPoints
					}
					for _, d := range dps {
						p := cgPoint{res: res, attrs: attrs(d.Attributes)}
						ns, _ := strconv.ParseInt(d.Time, 10, 64)
						p.at = time.Unix(0, ns)
						switch {
						case d.AsDouble != nil:
							p.value = *d.AsDouble
						case d.AsInt != nil:
							p.value, _ = strconv.ParseFloat(*d.AsInt, 64)
						}
						out = append(out, p)
					}
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// of keeps the points whose labels include want.
func of(ps []cgPoint, want map[string]string) []cgPoint {
	var out []cgPoint
	for _, p := range ps {
		ok := true
		for k, v := range want {
			if p.attrs[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, p)
		}
	}
	return out
}

func maxOf(ps []cgPoint) float64 {
	m := 0.0
	for _, p := range ps {
		m = max(m, p.value)
	}
	return m
}

// TestCgroupMetrics, on Slurm's cgroup containment (cgroup v1 here:
// proctrack/cgroup, task/cgroup, jobacct_gather/cgroup,
// PrologFlags=Alloc,Contain): a two-node job whose step on gn2 holds 200
// MiB for 5 s while the batch step on gn1 spins until it has used 2 s of
// CPU (a loaded machine gives it less than a core), between pauses. gn2's
// files hold the job's memory peak (memory.max_usage_in_bytes of Slurm's
// job group) at 200 MiB or more, with the run's identity and host gn2;
// gn1's job peak stays below it; gn1's job CPU time rises by seconds
// across the scrapes; pressure, which v1 does not keep, is absent and
// said so; the collector's own group is there too. The hungry step's own
// group (step 0) shows the peak on gn2 and is absent from gn1, where a
// small step 1 runs. The job's phase spans on both nodes agree with
// Slurm's own times and nest in each node's job span
// (checkTwoNodePhases).
func TestCgroupMetrics(t *testing.T) {
	withCluster(t, "--cgroup", "--prolog-flags", "Alloc,Contain")
	waitIdle(t)
	d := markerDir(t, "cgmetrics")
	const holdMiB = 200
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
srun -N1 -n1 -w gn2 --mem=400M bash -c '(head -c %[1]dM /dev/zero; sleep 5) | tail -c %[1]dM >/dev/null' &
sleep 3
while read -r -a st < /proc/$BASHPID/stat && [ $((st[13] + st[14])) -lt 200 ] && [ $SECONDS -lt 100 ]; do :; done
sleep 3
srun -N1 -n1 -w gn1 --mem=50M sleep 1
wait
`, holdMiB))
	runID := "rcg-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	r := asUser(t, 3*time.Minute, tokenEnv(), fmt.Sprintf("sbatch --wait -N2 -w gn1,gn2 --mem=500M --gym-otel=run_id=%s,job_dir=%s/run -o %s/job.out %s", runID, d, d, script))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	jobID := jobIDOf(t, r)
	waitNoCollector(t)
	dirs := map[string]string{"gn1": filepath.Join(d, "run", "otel"), "gn2": filepath.Join(d, "run", "otel", "nodes", "gn2")}
	peak := map[string]float64{}
	for node, dir := range dirs {
		path := filepath.Join(dir, "metrics.jsonl")
		ps := cgroupPoints(t, path, vocab.CgroupMemoryPeak)
		job := of(ps, map[string]string{"cgroup": "job"})
		if len(job) == 0 {
			nk := cgroupPoints(t, path, vocab.CgroupNotKept)
			t.Fatalf("%s: no job memory peak in %s; not kept: %v", node, path, nk)
		}
		for _, p := range job {
			for k, want := range map[string]string{"host.name": node, "slurm_job_id": jobID, "run_id": runID, "service.name.override": "cgroup"} {
				if p.res[k] != want {
					t.Fatalf("%s: a cgroup point's resource %s = %q, want %q (resource %v)", node, k, p.res[k], want, p.res)
				}
			}
		}
		peak[node] = maxOf(job)
		t.Logf("%s: %d distinct series of the cgroup readings over the job", node, cgroupSeries(t, path))
		t.Logf("%s: job memory peak %.1f MiB over %d points; step peaks: %v", node, peak[node]/(1<<20), len(job), stepPeaks(ps))
		if own := of(cgroupPoints(t, path, vocab.CgroupMemoryCurrent), map[string]string{"cgroup": "collector"}); maxOf(own) <= 0 {
			t.Errorf("%s: no memory of the collector's own group", node)
		}
		nk := cgroupPoints(t, path, vocab.CgroupNotKept)
		var pressure bool
		for _, p := range of(nk, map[string]string{"cgroup": "job", "family": "memory_pressure"}) {
			pressure = pressure || strings.Contains(p.attrs["reason"], "cgroup v1 keeps no pressure")
		}
		if !pressure {
			t.Errorf("%s: the job's memory pressure is not said to be not kept on v1: %v", node, of(nk, map[string]string{"cgroup": "job"}))
		}
		if ps := cgroupPoints(t, path, vocab.CgroupMemoryPressureSome); len(of(ps, map[string]string{"cgroup": "job"})) > 0 {
			t.Errorf("%s: a memory pressure value for Slurm's v1 job group", node)
		}
	}
	stepPeak := map[string]float64{}
	for node, dir := range dirs {
		stepPeak[node] = maxOf(of(cgroupPoints(t, filepath.Join(dir, "metrics.jsonl"), vocab.CgroupMemoryPeak), map[string]string{"cgroup": "step", "step": "0"}))
	}
	if stepPeak["gn2"] < holdMiB<<20 || stepPeak["gn1"] != 0 {
		t.Errorf("the hungry step 0's own peak: gn2 %.1f MiB (want >= %d), gn1 %.1f MiB (want none: it ran on gn2)",
			stepPeak["gn2"]/(1<<20), holdMiB, stepPeak["gn1"]/(1<<20))
	}
	checkTwoNodePhases(t, jobID, dirs)
	if peak["gn2"] < holdMiB<<20 {
		t.Errorf("gn2's job memory peak %.1f MiB, want >= %d MiB (its step held that)", peak["gn2"]/(1<<20), holdMiB)
	}
	if peak["gn1"] >= holdMiB<<20 {
		t.Errorf("gn1's job memory peak %.1f MiB: the hungry step ran on gn2", peak["gn1"]/(1<<20))
	}
	cpu := of(cgroupPoints(t, filepath.Join(dirs["gn1"], "metrics.jsonl"), vocab.CgroupCPUSeconds), map[string]string{"cgroup": "job"})
	if len(cpu) < 2 {
		t.Fatalf("gn1: %d points of the job's CPU time, want several", len(cpu))
	}
	first, last := cpu[0], cpu[len(cpu)-1]
	t.Logf("gn1: job CPU %.2f s at %s, %.2f s at %s (%d points)", first.value, first.at.Format("15:04:05.000"), last.value, last.at.Format("15:04:05.000"), len(cpu))
	if last.value-first.value < 1 {
		t.Errorf("gn1: the job's CPU time rose %.2f s across the scrapes, want >= 1 s (the batch step spun 2 s of CPU)", last.value-first.value)
	}
}

// cgroupSeries counts the distinct series (name and point attributes) of
// the cgroup producer in path.
func cgroupSeries(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		var l struct {
			ResourceMetrics []struct {
				Resource     json.RawMessage `json:"resource"`
				ScopeMetrics []struct {
					Metrics []map[string]json.RawMessage `json:"metrics"`
				} `json:"scopeMetrics"`
			} `json:"resourceMetrics"`
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		for _, rm := range l.ResourceMetrics {
			if !strings.Contains(string(rm.Resource), `"service.name.override","value":{"stringValue":"cgroup"}`) {
				continue
			}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					var name string
					_ = json.Unmarshal(m["name"], &name)
					for _, k := range []string{"gauge", "sum"} {
						var body struct {
							DataPoints []struct {
								Attributes json.RawMessage `json:"attributes"`
							} `json:"dataPoints"`
						}
						if json.Unmarshal(m[k], &body) == nil {
							for _, d := range body.DataPoints {
								seen[name+string(d.Attributes)] = true
							}
						}
					}
				}
			}
		}
	}
	return len(seen)
}

func stepPeaks(ps []cgPoint) map[string]string {
	m := map[string]float64{}
	for _, p := range of(ps, map[string]string{"cgroup": "step"}) {
		m[p.attrs["step"]] = max(m[p.attrs["step"]], p.value)
	}
	out := map[string]string{}
	for s, v := range m {
		out[s] = fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	return out
}
