package supervise_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/selfmetrics"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestMeasureMemory prints what an idle collector's memory is made of
// (issue 29's P4): VmRSS, PSS, RssFile and RssAnon of the collector of a
// job that scrapes a vLLM stand-in and node_exporter (all its default
// collectors) every 5 s and exports to a backend, first as the supervisor
// starts it, then started by hand on the configuration the supervisor
// rendered, once per variant: as rendered (twice: the A-against-A
// control), without the receipt's periodic reader, without the file
// exporters, without the span metrics connector, without all three,
// without the collector's own metrics, with other Go runtime settings, and
// without the start's two releases (collector/startgc.go: the garbage
// collector on through the start, GOGC=100; the start's pages of the
// binary kept). Each run by hand is a memory control group of its own (on
// cgroup v2 or v1's memory hierarchy, when the test may make one), whose
// charge is reported beside the process's figures.
// RssFile counts only the binary's pages a run touched, so a component
// left out of the configuration shows what its code costs at run time. The
// variants run interleaved over rounds. Each run prints a
// testenv.MemorySummary line (`make bench` reads them into its P4 rows).
// It asserts nothing about memory; it runs only with
// GYM_OTEL_MEASURE=memory (about 10 minutes):
//
//	GYM_OTEL_MEASURE=memory go test -run TestMeasureMemory -v ./helper/supervise
//
// GYM_OTEL_MEASURE_LOAD=RATE adds, after each run's idle samples, 20 s of
// RATE spans/s from tests/bench/loadgen: the collector's CPU seconds and
// highest VmRSS and RssAnon under it (what a runtime setting costs in CPU).
// GYM_OTEL_MEASURE_VARIANTS=PREFIX,... runs only the variants whose names
// start so ("as rendered,GOGC").
// GYM_OTEL_MEASURE_ROUNDS (default 2) and GYM_OTEL_MEASURE_SECONDS (the
// sampling window of each run after 16 s of warm-up, default 20) size it;
// GYM_OTEL_MEASURE_BINARIES=NAME=PATH,... adds collector binaries, each run
// on the rendered configuration as is in every round.
// GYM_OTEL_MEASURE_TARGETS=none measures P4's idle row instead: a job with
// no scrape target of its own, with more variants: the supervisor's reads
// of the collector's own metrics by hand (as its liveness check,
// pollSelf, does: every second; asking for gzip; every 5 s), and the
// counters pushed by the periodic reader every second instead of pulled.
// The other runs by hand have no reader. The runs by hand receive none of
// the supervisor's readings of the node (nodemetrics.go: a few dozen
// points per interval, pushed to otlp/plugin); the supervised run does.
func TestMeasureMemory(t *testing.T) {
	if os.Getenv("GYM_OTEL_MEASURE") != "memory" {
		t.Skip("set GYM_OTEL_MEASURE=memory to measure")
	}
	rounds, window := 2, 20*time.Second
	if v, err := strconv.Atoi(os.Getenv("GYM_OTEL_MEASURE_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	if v, err := strconv.Atoi(os.Getenv("GYM_OTEL_MEASURE_SECONDS")); err == nil && v > 0 {
		window = time.Duration(v) * time.Second
	}
	const warm = 16 * time.Second // three scrapes at 5 s
	loadRate, _ := strconv.Atoi(os.Getenv("GYM_OTEL_MEASURE_LOAD"))
	var loadgen string
	if loadRate > 0 {
		loadgen = filepath.Join(t.TempDir(), "loadgen")
		if out, err := exec.Command("go", "build", "-o", loadgen, filepath.Join(testenv.Root(), "tests/bench/loadgen")).CombinedOutput(); err != nil {
			t.Fatalf("building loadgen: %v\n%s", err, out)
		}
	}
	bin := testenv.Collector(t)
	groups := measureGroups(t)
	binaries := [][2]string{{filepath.Base(bin), bin}}
	for _, nb := range strings.Split(os.Getenv("GYM_OTEL_MEASURE_BINARIES"), ",") {
		if name, path, ok := strings.Cut(nb, "="); ok {
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("GYM_OTEL_MEASURE_BINARIES: %v", err)
			}
			binaries = append(binaries, [2]string{name, path})
		}
	}

	idle := os.Getenv("GYM_OTEL_MEASURE_TARGETS") == "none"
	var vllm, nodePort int
	if !idle {
		vllm = harness.StartVLLM(t)
		neBin := testenv.Binary(t, "prometheus-node-exporter", "/usr/bin/prometheus-node-exporter")
		nodePort = harness.FreePort(t)
		harness.StartProc(t, "node_exporter", nil, neBin, "--web.listen-address=127.0.0.1:"+strconv.Itoa(nodePort))
		harness.WaitFor(t, 10*time.Second, "node_exporter", func() bool {
			return harness.HTTPOK(fmt.Sprintf("http://127.0.0.1:%d/metrics", nodePort))
		})
	}
	token := "tok-" + harness.RandHex(8)
	backend := harness.StartBackend(t, token)

	// sample reads pid's memory every second for d, and the charge of
	// group (a directory of measureGroups; "" for none) with it.
	sample := func(pid int, d time.Duration, group string) ([]testenv.Mem, []float64, error) {
		var v []testenv.Mem
		var charge []float64
		for t0 := time.Now(); time.Since(t0) < d; time.Sleep(time.Second) {
			m, err := testenv.ReadMem(pid)
			if err != nil {
				return v, charge, err
			}
			v = append(v, m)
			if group != "" {
				if c, err := testenv.ReadCharge(group, groups.file); err == nil {
					charge = append(charge, c)
				}
			}
		}
		return v, charge, nil
	}
	sizeOf := func(p string) float64 {
		st, err := os.Stat(p)
		if err != nil {
			return 0
		}
		return float64(st.Size()) / (1 << 20)
	}
	report := func(pid int, variant, binName, binPath string, round int, v []testenv.Mem) testenv.MemorySummary {
		pick := func(f func(testenv.Mem) float64) float64 {
			var x []float64
			for _, m := range v {
				x = append(x, f(m)/1024)
			}
			slices.Sort(x)
			return x[len(x)/2]
		}
		var maxRSS float64
		for _, m := range v {
			maxRSS = max(maxRSS, m.RSS/1024)
		}
		s := testenv.MemorySummary{Variant: variant, Binary: binName, Size: sizeOf(binPath), Round: round, Samples: len(v),
			RSS:  pick(func(m testenv.Mem) float64 { return m.RSS }),
			PSS:  pick(func(m testenv.Mem) float64 { return m.PSS }),
			File: pick(func(m testenv.Mem) float64 { return m.File }),
			Anon: pick(func(m testenv.Mem) float64 { return m.Anon }), MaxRSS: maxRSS}
		seg, _ := testenv.Segments(pid, binPath)
		for _, kib := range seg {
			s.Segments = append(s.Segments, kib/1024)
		}
		return s
	}

	// The supervisor's own run: its configuration and environment.
	s := harness.StartSup(t, harness.Job{JobID: "700", VLLMPort: vllm, NodePort: nodePort, Scrape: 5,
		Endpoint: backend.URL, Token: token}).MustReady(t)
	time.Sleep(warm)
	v, _, err := sample(s.Report.CollectorPID, window, "")
	if err != nil {
		t.Fatalf("the supervised collector: %v", err)
	}
	t.Log(report(s.Report.CollectorPID, "as the supervisor runs it", binaries[0][0], bin, 0, v).Line())
	receiverToken := s.ReceiverToken
	env := environOf(t, s.Report.CollectorPID)
	rendered, err := os.ReadFile(filepath.Join(s.Out, "collector.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ports := s.Report.Ports
	if _, err := s.Drain(t, 60*time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	// The supervisor's port for the runs by hand: the receipt's sink at
	// shutdown.
	serveOn(t, ports.Final, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))

	type variant struct {
		name  string
		edit  func(cfg map[string]any)
		env   []string
		reads time.Duration // the supervisor's liveness reads by hand, this often (0: none)
		gzip  bool          // those reads ask for gzip (Go's client's default)
	}
	variants := []variant{
		{name: "as rendered"},
		{name: "as rendered (A-against-A control)"},
		{name: "without the receipt's periodic reader", edit: dropReceiptReader},
		{name: "without the file exporters", edit: dropFileExporters},
		{name: "without the span metrics connector", edit: dropSpanMetrics},
		{name: "without all three", edit: func(c map[string]any) { dropReceiptReader(c); dropFileExporters(c); dropSpanMetrics(c) }},
		{name: "without the collector's own metrics", edit: func(c map[string]any) {
			sub(c, "service", "telemetry")["metrics"] = map[string]any{"level": "none"}
		}},
		{name: "GOGC=50", env: []string{"GOGC=50"}},
		{name: "GOGC=25", env: []string{"GOGC=25"}},
		{name: "keeping the start's pages of the binary", env: []string{"GYM_OTEL_KEEP_START_PAGES=1"}},
		// GOGC set in the environment keeps the garbage collector on
		// through the start (collector/startgc.go).
		{name: "with the start's garbage collection (GOGC=100)", env: []string{"GOGC=100"}},
		{name: "with the start's garbage collection and pages (GOGC=100, keeping the pages)",
			env: []string{"GOGC=100", "GYM_OTEL_KEEP_START_PAGES=1"}},
	}
	if idle {
		// What the supervisor asks of an idle job's collector.
		variants = append(variants,
			variant{name: "with the supervisor's reads", reads: time.Second},
			variant{name: "with the supervisor's reads every 5 s", reads: 5 * time.Second},
			variant{name: "with the supervisor's reads, gzip", reads: time.Second, gzip: true},
			variant{name: "with the counters pushed every second, no pull reader", edit: pushCounters},
		)
	}
	if only := os.Getenv("GYM_OTEL_MEASURE_VARIANTS"); only != "" {
		variants = slices.DeleteFunc(variants, func(v variant) bool {
			return !slices.ContainsFunc(strings.Split(only, ","), func(w string) bool { return strings.HasPrefix(v.name, w) })
		})
	}
	type run struct {
		variant
		binName, binPath string
	}
	var runs []run
	for _, b := range binaries[1:] {
		runs = append(runs, run{variant{name: "as rendered"}, b[0], b[1]})
	}
	for _, va := range variants {
		runs = append(runs, run{va, binaries[0][0], binaries[0][1]})
	}
	for round := 1; round <= rounds; round++ {
		for i, r := range runs {
			var cfg map[string]any
			if err := yaml.Unmarshal(rendered, &cfg); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(harness.SharedDir(t), fmt.Sprintf("r%d-%d", round, i))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, e := range sub(cfg, "exporters") {
				if m, ok := e.(map[string]any); ok && m["path"] != nil {
					m["path"] = filepath.Join(dir, filepath.Base(m["path"].(string)))
				}
			}
			if r.edit != nil {
				r.edit(cfg)
			}
			y, err := yaml.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "collector.yaml")
			if err := os.WriteFile(path, y, 0o600); err != nil {
				t.Fatal(err)
			}
			// Each run in a memory group of its own, joined before the
			// collector's exec so that all it faults in is charged there.
			argv := []string{r.binPath, "--config", path}
			group := groups.make(t, fmt.Sprintf("r%d-%d", round, i))
			if group != "" {
				argv = append([]string{"/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, group}, argv...)
			}
			p := harness.StartProc(t, "collector "+r.name, append(slices.Clone(env), r.env...), argv...)
			harness.WaitFor(t, 30*time.Second, "the collector's health check", func() bool {
				if !p.Running() {
					t.Fatalf("%s: the collector exited: %v\n%s", r.name, p.Err, p.Out.String())
				}
				return harness.HTTPOK(s.HealthURL())
			})
			stopReads := func() {}
			if r.reads > 0 {
				stopReads = readSelfEvery(ports.Telemetry, r.reads, r.gzip)
			}
			time.Sleep(warm)
			v, charge, err := sample(p.Cmd.Process.Pid, window, group)
			stopReads()
			if err != nil {
				t.Fatalf("%s: %v\n%s", r.name, err, p.Out.String())
			}
			sum := report(p.Cmd.Process.Pid, r.name, r.binName, r.binPath, round, v)
			if len(charge) > 0 {
				slices.Sort(charge)
				sum.Group = charge[len(charge)/2] / 1024
			}
			if loadRate > 0 {
				sum.LoadRate, sum.LoadCPU, sum.LoadMaxRSS, sum.LoadMaxAnon = memLoad(t, loadgen, p.Cmd.Process.Pid, ports.OTLPHTTP, receiverToken, loadRate)
			}
			t.Log(sum.Line())
			syscall.Kill(p.Cmd.Process.Pid, syscall.SIGTERM)
			if err := p.Wait(t, 30*time.Second); err != nil {
				t.Fatalf("%s: exit: %v\n%s", r.name, err, p.Out.String())
			}
			groups.remove(group)
			if round == 1 && i == 0 && !idle {
				if m, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl")); err != nil || !strings.Contains(string(m), "num_requests_running") ||
					!strings.Contains(string(m), `"name":"node_`) {
					t.Fatalf("%s: the vLLM stand-in's and node_exporter's metrics are not in metrics.jsonl (%v)", r.name, err)
				}
			}
		}
	}
}

// memLoad sends rate spans/s for 20 s to the collector pid listening for
// OTLP/HTTP on port, and returns the rate achieved, the collector's CPU
// seconds (user + system) meanwhile, and its highest VmRSS and RssAnon in
// MiB.
func memLoad(t *testing.T, loadgen string, pid, port int, token string, rate int) (achieved, cpu, maxRSS, maxAnon float64) {
	t.Helper()
	cpu0 := cpuSeconds(t, pid)
	cmd := exec.Command(loadgen, "--steps", fmt.Sprintf("%d:20s", rate), "--tag", "mem")
	cmd.Env = []string{fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", port),
		"OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer " + token}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("loadgen: %v\n%s", err, out.String())
			}
			running = false
		case <-time.After(500 * time.Millisecond):
			if m, err := testenv.ReadMem(pid); err == nil {
				maxRSS, maxAnon = max(maxRSS, m.RSS/1024), max(maxAnon, m.Anon/1024)
			}
		}
	}
	cpu = cpuSeconds(t, pid) - cpu0
	if _, js, ok := strings.Cut(out.String(), "["); ok {
		var res []struct {
			Achieved float64 `json:"achieved_rate"`
		}
		if json.Unmarshal([]byte("["+js), &res) == nil && len(res) == 1 {
			achieved = res[0].Achieved
		}
	}
	return achieved, cpu, maxRSS, maxAnon
}

// cpuSeconds is pid's user plus system CPU time (/proc/<pid>/stat), in s.
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	st, err := proc.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return float64(st.UTime+st.STime) / 100 // USER_HZ
}

// serveOn serves h on 127.0.0.1:port until the end of the test.
func serveOn(t *testing.T, port int, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// environOf is pid's environment (the collector's, as the supervisor set it).
func environOf(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, e := range strings.Split(string(b), "\x00") {
		if e != "" {
			env = append(env, e)
		}
	}
	return env
}

// sub is cfg's map at path, created when missing.
func sub(cfg map[string]any, path ...string) map[string]any {
	m := cfg
	for _, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	return m
}

// dropFromPipelines removes the components drop says from every
// pipeline's receivers and exporters.
func dropFromPipelines(cfg map[string]any, drop func(string) bool) {
	for _, p := range sub(cfg, "service", "pipelines") {
		pm, _ := p.(map[string]any)
		for _, key := range []string{"receivers", "exporters"} {
			list, _ := pm[key].([]any)
			var kept []any
			for _, c := range list {
				if s, _ := c.(string); !drop(s) {
					kept = append(kept, c)
				}
			}
			pm[key] = kept
		}
	}
}

// pushCounters replaces the pull reader of the collector's own metrics
// with the periodic reader's export every second.
func pushCounters(cfg map[string]any) {
	keepReaders(cfg, func(periodic map[string]any) bool {
		if periodic != nil {
			periodic["interval"] = 1000
		}
		return periodic != nil
	})
}

// keepReaders keeps the readers of the collector's own metrics for which
// keep, given the reader's "periodic" settings (nil for a pull reader),
// is true.
func keepReaders(cfg map[string]any, keep func(periodic map[string]any) bool) {
	m := sub(cfg, "service", "telemetry", "metrics")
	readers, _ := m["readers"].([]any)
	var kept []any
	for _, r := range readers {
		rm, _ := r.(map[string]any)
		if periodic, _ := rm["periodic"].(map[string]any); keep(periodic) {
			kept = append(kept, r)
		}
	}
	m["readers"] = kept
}

// readSelfEvery reads the collector's own metrics on port every d, as
// the supervisor's liveness check does (selfmetrics.Scrape), or with Go's
// client's default Accept-Encoding (gzip), until the returned func is
// called.
func readSelfEvery(port int, d time.Duration, gzip bool) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if !gzip {
					_, _ = selfmetrics.Scrape(port)
				} else if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); err == nil {
					_, _ = selfmetrics.ParseText(resp.Body)
					resp.Body.Close()
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// dropReceiptReader removes the periodic reader that exports the
// collector's own metrics to the supervisor at shutdown (the receipt's
// final figures).
func dropReceiptReader(cfg map[string]any) {
	keepReaders(cfg, func(periodic map[string]any) bool { return periodic == nil })
}

// dropFileExporters removes the file exporters (the job's jsonl files).
func dropFileExporters(cfg map[string]any) {
	isFile := func(s string) bool { return s == "file" || strings.HasPrefix(s, "file/") }
	for k := range sub(cfg, "exporters") {
		if isFile(k) {
			delete(sub(cfg, "exporters"), k)
		}
	}
	dropFromPipelines(cfg, isFile)
}

// dropSpanMetrics removes the span metrics connector.
func dropSpanMetrics(cfg map[string]any) {
	delete(cfg, "connectors")
	dropFromPipelines(cfg, func(s string) bool { return s == "span_metrics" || strings.HasPrefix(s, "span_metrics/") })
}

// memGroups makes the memory control groups of TestMeasureMemory's runs
// by hand, one per run, under a parent of the test's: on cgroup v2 (the
// memory controller at /sys/fs/cgroup) or on the v1 memory hierarchy.
// Without either, or without the right to make one, make returns "" and
// the runs have no group (no charge is reported).
type memGroups struct {
	parent string // "": none
	file   string // the charge file: memory.current or memory.usage_in_bytes
}

// measureGroups makes the parent group, removed at the test's end.
func measureGroups(t *testing.T) *memGroups {
	g := &memGroups{}
	name := "gym-otel-measure-" + harness.RandHex(6)
	if c, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && slices.Contains(strings.Fields(string(c)), "memory") {
		g.parent, g.file = filepath.Join("/sys/fs/cgroup", name), "memory.current"
		if err := os.Mkdir(g.parent, 0o755); err == nil {
			// The parent's children get the memory controller.
			err = os.WriteFile(filepath.Join(g.parent, "cgroup.subtree_control"), []byte("+memory"), 0o644)
			if err != nil {
				os.Remove(g.parent)
				g.parent = ""
			}
		} else {
			g.parent = ""
		}
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.usage_in_bytes"); err == nil {
		g.parent, g.file = filepath.Join("/sys/fs/cgroup/memory", name), "memory.usage_in_bytes"
		if os.Mkdir(g.parent, 0o755) != nil {
			g.parent = ""
		}
	}
	if g.parent == "" {
		t.Log("no memory group of the test's own: the runs by hand report no group charge")
		return g
	}
	t.Cleanup(func() { os.Remove(g.parent) })
	return g
}

// make makes the run's group; "" when there is no parent.
func (g *memGroups) make(t *testing.T, name string) string {
	if g.parent == "" {
		return ""
	}
	dir := filepath.Join(g.parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Logf("memory group %s: %v: no group charge for this run", dir, err)
		return ""
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir
}

// remove removes a run's group once its collector has exited (its charge
// moves to the parent).
func (g *memGroups) remove(dir string) {
	if dir != "" {
		os.Remove(dir)
	}
}
