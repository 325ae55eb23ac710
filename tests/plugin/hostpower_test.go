package plugin_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// TestHostPowerRAPL: with the plugstack's host_power=rapl, the prolog on
// each node opens, as root, the RAPL zones of a powercap tree (this
// machine has no RAPL: the test's build of the core, tag
// gymotel_powercap_test, has the tree's path compiled in; every other
// build opens /sys/class/powercap) and hands the job's supervisor,
// running as the job's user, read-only descriptors: the tree's energy_uj
// is root's only (mode 0400), as the kernel's. The test drives the
// counter as a 100 W package for the job's life, written in place (the
// handed file, not the path, is what the supervisor reads), across a wrap
// of its range 8 s in. A two-node job with a step on both nodes then has,
// in `inspect --json`, each node's host energy over its run and over the
// batch step (bracketed from the sums' start, before the first scrape;
// its end only where a scrape follows it, see below) and step 0, trusted,
// at 100 W within 2 %, and one wrap on each node.
func TestHostPowerRAPL(t *testing.T) {
	waitIdle(t)
	tag := fmt.Sprint(time.Now().UnixNano())
	base := filepath.Join(os.TempDir(), "gym-otel"+instance+"-powercap-"+tag)
	tree := filepath.Join(base, "powercap")
	zone := filepath.Join(tree, "intel-rapl:0")
	if err := os.MkdirAll(zone, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	const maxUJ = 5000000000 // 5 kJ: the 100 W counter wraps within the job's first minute
	for f, v := range map[string]string{"name": "package-0", "max_energy_range_uj": fmt.Sprint(maxUJ)} {
		if err := os.WriteFile(filepath.Join(zone, f), []byte(v+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	energy := filepath.Join(zone, "energy_uj")
	// 800 J below the top when the job is submitted: the wrap comes 8 s
	// in, within the job's script.
	start := uint64(maxUJ - 800000000)
	if err := os.WriteFile(energy, []byte(fmt.Sprintf("%d\n", start)), 0o400); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(energy, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// The tests' core, with the tree compiled in.
	so := filepath.Join(base, "gym_otel_core.so")
	build := exec.Command("go", "build", "-buildmode=c-shared", "-tags", "gymotel_powercap_test",
		"-ldflags", "-X github.com/gym-otel-spank/gym-otel-spank/helper/callbacks.testPowercapRoot="+tree, "-o", so, "./spank/core")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_LDFLAGS=-Wl,-z,nodelete")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the tests' core: %v\n%s", err, out)
	}
	conf := filepath.Join(base, "plugstack.conf")
	if err := os.WriteFile(conf, []byte(strings.TrimSuffix(goodConf, "\n")+" host_power=rapl core="+so+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := clusterConf
	clusterConf = conf
	err = upCluster()
	clusterConf = old
	t.Cleanup(func() {
		if err := upCluster(); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t)
	// The counter at 100 W from now, written in place every 20 ms; the
	// digits only grow between wraps, and a shorter value is padded.
	t0 := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			uj := (start + uint64(time.Since(t0).Microseconds())*100) % maxUJ
			s := fmt.Sprintf("%d\n", uj)
			s += strings.Repeat(" ", max(0, 12-len(s)))
			if _, err := w.WriteAt([]byte(s), 0); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	d := markerDir(t, "hostpower")
	script := writeScript(t, filepath.Base(d)+".sh", "sleep 3\nsrun -N2 --ntasks-per-node=1 sleep 4\nsleep 2\n")
	r := asUser(t, 180*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N2 --wait --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	waitNoCollector(t)
	js, err := exec.Command(filepath.Join(root, "build", "gym-otel-spank"), "inspect", "--json", "--no-sacct", filepath.Join(d, "run")).Output()
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	var rep struct {
		HostEnergy []inspect.HostEnergy `json:"host_energy"`
	}
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatal(err)
	}
	rows := map[string]inspect.HostEnergy{}
	for _, h := range rep.HostEnergy {
		rows[h.Node+" "+h.Step] = h
		t.Logf("%s step %q: %v J, %v W over %v..%v; %v", h.Node, h.Step, h.Joules, h.Watts, h.Start, h.End, h.Verdict)
	}
	// The batch step's end: this job has no scrape target, so there is
	// no final scrape at the script's end (finalscrape.go) and a sample
	// after it comes only where the collector scrapes again before the
	// drain: its figure may be refused for that alone (the user guide's
	// limit); its start is bracketed by the sums' start.
	if h := rows["gn1 batch"]; !h.Verdict.Trusted && strings.Join(h.Verdict.Why, "|") == inspect.ReasonNotBracketed+": gn1: no sample at or after the end of package-0" {
		t.Logf("gn1's batch step: no sample after its end (no final scrape without a scrape target): %v", h.Verdict)
		delete(rows, "gn1 batch")
		rows["gn1 batch (refused)"] = inspect.HostEnergy{}
	}
	for _, k := range []string{"gn1 ", "gn1 batch", "gn1 0", "gn2 ", "gn2 0"} {
		if _, refused := rows[k+" (refused)"]; refused {
			continue
		}
		h, ok := rows[k]
		if !ok {
			t.Errorf("no host energy row %q", k)
			continue
		}
		if !h.Verdict.Trusted || !h.Joules.Known() || math.Abs(float64(h.Watts)-100) > 2 || strings.Join(h.Zones, ",") != "package-0" || h.Attribution != inspect.HostAttributionNode {
			t.Errorf("%q: %v J, %v W, zones %v, %v: want trusted, 100 W within 2 %%", k, h.Joules, h.Watts, h.Zones, h.Verdict)
		}
	}
	// The whole run spans the job's life: about the script's 9 s.
	if h := rows["gn1 "]; !(float64(h.Joules) > 800) {
		t.Errorf("gn1's run: %v J, want more than 800 (about 9 s at 100 W)", h.Joules)
	}
	// The counter wrapped once during the job, on each node.
	for _, f := range []string{"otel/metrics.jsonl", "otel/nodes/gn2/metrics.jsonl"} {
		m, err := otlptest.Read(filepath.Join(d, "run", f))
		if err != nil {
			t.Fatal(err)
		}
		wraps := -1.0
		for _, x := range m.Metrics {
			if x.Name == vocab.HostEnergyWraps && x.Sum != nil {
				for _, p := range x.Sum.DataPoints {
					wraps = p.Value()
				}
			}
		}
		if wraps != 1 {
			t.Errorf("%s: %s %v at the end, want 1", f, vocab.HostEnergyWraps, wraps)
		}
	}
	// The supervisor's environment carried the zone; the collector's did
	// not (it gets an environment of its own): the node's log says nothing
	// of host energy trouble.
	if log, _ := os.ReadFile(filepath.Join(d, "run", "otel", "supervisor.log")); strings.Contains(string(log), "host energy") {
		t.Errorf("supervisor.log:\n%s", log)
	}
	waitIdle(t)
}
