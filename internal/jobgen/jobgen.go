// Package jobgen makes job dirs of many nodes for the tests of inspect
// from real collector output: a recorded two-node job (its otel/ dir, as
// the collectors wrote it; helper/inspect/testdata/slurmrun/gym-two-nodes)
// becomes a job of n nodes gn1 .. gn<n>. The first node's files stay as
// recorded (the batch node: the queue wait, the batch step, the Gym
// rollouts); every other node is the recorded second node with its name
// replaced and its figures varied, so that a report has a spread to show
// and outliers to name.
//
// It is a test kit: production code never imports it.
package jobgen

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// Options say how the nodes vary. Node names are "gn<i>", i from 1.
type Options struct {
	// Nodes is how many nodes the job has (2 or more).
	Nodes int
	// Spread is the per-node variation of the varied figures, a fraction:
	// node i's figures are the recorded ones times a factor in
	// [1-Spread, 1+Spread], the same factor for every figure of the node
	// (Factor).
	Spread float64
	// Slow names a node whose model server and GPU did a fraction
	// SlowFactor of the others' work (vLLM's counters and gauges, the GPU
	// utilisation and power): the throughput outlier. Empty: none.
	Slow       string
	SlowFactor float64
	// LateProlog names a node whose prolog span ends LatePrologSeconds
	// later than recorded: the phase outlier. Empty: none.
	LateProlog        string
	LatePrologSeconds float64
}

// Default is the 64-node job of the tests: a spread of 8%, gn37 slow (a
// quarter of the work), gn50's prolog 5 s late. For fewer nodes the
// outliers are the nodes at the same place in the list.
func Default(n int) Options {
	o := Options{Nodes: n, Spread: 0.08, SlowFactor: 0.25, LatePrologSeconds: 5}
	if n >= 4 {
		o.Slow = fmt.Sprintf("gn%d", max(2, n*37/64))
		o.LateProlog = fmt.Sprintf("gn%d", max(3, n*50/64))
	}
	return o
}

// Factor is node i's variation (1 for gn1, whose files stay as recorded):
// a fixed, spread-out sequence in [1-spread, 1+spread].
func Factor(i int, spread float64) float64 {
	if i <= 1 {
		return 1
	}
	return 1 + spread*(float64((i*37)%21)-10)/10
}

// varied is whether a metric's points are varied by the node's factor,
// and its upper bound (0: none).
func varied(name string) (bool, float64) {
	switch {
	case name == "vllm_kv_cache_usage_perc":
		return true, 1
	case name == "DCGM_FI_DEV_GPU_UTIL":
		return true, 100
	case strings.HasPrefix(name, "vllm_num_requests_"):
		return false, 0 // counts of requests at a scrape stay whole
	case strings.HasPrefix(name, "vllm_"), name == "DCGM_FI_DEV_POWER_USAGE", strings.HasPrefix(name, "node_load"),
		name == vocab.CgroupCPUSeconds, name == vocab.CgroupMemoryPeak:
		return true, 0
	}
	return false, 0
}

// slowed is whether a metric does a slow node's share of the work.
func slowed(name string) bool {
	return (strings.HasPrefix(name, "vllm_") && !strings.HasPrefix(name, "vllm_num_requests_")) || name == "DCGM_FI_DEV_GPU_UTIL" || name == "DCGM_FI_DEV_POWER_USAGE"
}

// Make writes the job dir's otel/ dir at dst (created; it must not hold
// files of another job) from the recorded otel/ dir src, whose files may
// be gzipped (*.gz, written unzipped). src must hold the first node's
// files and nodes/gn2/. Files other than the jsonl are copied with the
// name replaced: receipt.json (the recorded second node's counts),
// state.json, collector.yaml. The jsonl of node i: every "gn2" replaced
// by "gn<i>" (host.name, server addresses, cgroup paths); the points of
// the varied metrics (vLLM's, the GPU utilisation and power, load,
// cgroup CPU and memory peak: gauges and sums, not histograms) times
// Factor(i), and a slow node's times SlowFactor, counters rounded where
// recorded whole, fractions and percentages kept within their bound; the
// late prolog node's slurm.prolog span ending later.
func Make(src, dst string, o Options) error {
	if o.Nodes < 2 {
		return fmt.Errorf("jobgen: %d nodes: want 2 or more", o.Nodes)
	}
	if err := copyDir(src, dst, func(string, []byte) ([]byte, error) { return nil, nil }, true); err != nil {
		return err
	}
	node2 := filepath.Join(src, "nodes", "gn2")
	for i := 2; i <= o.Nodes; i++ {
		name := fmt.Sprintf("gn%d", i)
		f, slow := Factor(i, o.Spread), 1.0
		if name == o.Slow {
			slow = o.SlowFactor
		}
		late := 0.0
		if name == o.LateProlog {
			late = o.LatePrologSeconds
		}
		edit := func(file string, data []byte) ([]byte, error) {
			data = bytes.ReplaceAll(data, []byte("gn2"), []byte(name))
			switch file {
			case "metrics.jsonl":
				return eachLine(data, func(l []byte) ([]byte, error) { return varyMetrics(l, f, slow) })
			case "traces.jsonl":
				if late > 0 {
					return eachLine(data, func(l []byte) ([]byte, error) { return lateProlog(l, late) })
				}
			}
			return data, nil
		}
		if err := copyDir(node2, filepath.Join(dst, "nodes", name), edit, false); err != nil {
			return err
		}
	}
	return nil
}

// copyDir copies the files of src (and, when deep, its subdirs) to dst,
// unzipping *.gz, through edit (a nil result: the data as read).
func copyDir(src, dst string, edit func(file string, data []byte) ([]byte, error), deep bool) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			if rel != "." && !deep {
				return filepath.SkipDir
			}
			return os.MkdirAll(to, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(data))
			if err != nil {
				return fmt.Errorf("jobgen: %s: %w", path, err)
			}
			if data, err = io.ReadAll(zr); err != nil {
				return fmt.Errorf("jobgen: %s: %w", path, err)
			}
			to = strings.TrimSuffix(to, ".gz")
		}
		out, err := edit(filepath.Base(to), data)
		if err != nil {
			return fmt.Errorf("jobgen: %s: %w", path, err)
		}
		if out == nil {
			out = data
		}
		return os.WriteFile(to, out, 0o644)
	})
}

// eachLine applies fn to every line of data (newline-terminated lines;
// a last line without one is kept as it is).
func eachLine(data []byte, fn func([]byte) ([]byte, error)) ([]byte, error) {
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		l, err := fn(sc.Bytes())
		if err != nil {
			return nil, err
		}
		out.Write(l)
		out.WriteByte('\n')
	}
	return out.Bytes(), sc.Err()
}

type obj = map[string]any

func list(v any) []any { l, _ := v.([]any); return l }
func object(v any) obj { m, _ := v.(obj); return m }

// decode reads one OTLP-JSON line keeping numbers as written.
func decode(l []byte) (obj, error) {
	d := json.NewDecoder(bytes.NewReader(l))
	d.UseNumber()
	var m obj
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

func encode(m obj) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// varyMetrics multiplies the varied metrics' points of one metrics line
// by f, the slowed ones also by slow.
func varyMetrics(l []byte, f, slow float64) ([]byte, error) {
	if !bytes.Contains(l, []byte(`"vllm_`)) && !bytes.Contains(l, []byte(`"DCGM_`)) && !bytes.Contains(l, []byte(`"node_load`)) &&
		!bytes.Contains(l, []byte(`"`+vocab.CgroupPrefix)) {
		return l, nil
	}
	m, err := decode(l)
	if err != nil {
		return nil, err
	}
	for _, rm := range list(m["resourceMetrics"]) {
		for _, sm := range list(object(rm)["scopeMetrics"]) {
			for _, mv := range list(object(sm)["metrics"]) {
				met := object(mv)
				name, _ := met["name"].(string)
				ok, bound := varied(name)
				if !ok {
					continue
				}
				k := f
				if slowed(name) {
					k *= slow
				}
				for _, kind := range []string{"gauge", "sum"} {
					for _, dp := range list(object(met[kind])["dataPoints"]) {
						scale(object(dp), k, bound, kind == "sum")
					}
				}
			}
		}
	}
	return encode(m)
}

// scale multiplies one data point's value.
func scale(dp obj, k, bound float64, counter bool) {
	if n, ok := dp["asDouble"].(json.Number); ok {
		v, err := n.Float64()
		if err != nil {
			return
		}
		w := v * k
		if counter && v == math.Trunc(v) {
			w = math.Round(w)
		}
		if bound > 0 {
			w = math.Min(w, bound)
		}
		dp["asDouble"] = json.Number(strconv.FormatFloat(w, 'g', -1, 64))
	}
	if s, ok := dp["asInt"].(string); ok {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return
		}
		dp["asInt"] = strconv.FormatInt(int64(math.Round(float64(v)*k)), 10)
	}
}

// lateProlog moves the end of the line's slurm.prolog spans later by
// late seconds.
func lateProlog(l []byte, late float64) ([]byte, error) {
	if !bytes.Contains(l, []byte(`"`+vocab.SpanProlog+`"`)) {
		return l, nil
	}
	m, err := decode(l)
	if err != nil {
		return nil, err
	}
	for _, rs := range list(m["resourceSpans"]) {
		for _, ss := range list(object(rs)["scopeSpans"]) {
			for _, sv := range list(object(ss)["spans"]) {
				sp := object(sv)
				if sp["name"] != vocab.SpanProlog {
					continue
				}
				end, err := strconv.ParseUint(fmt.Sprint(sp["endTimeUnixNano"]), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("slurm.prolog endTimeUnixNano: %w", err)
				}
				sp["endTimeUnixNano"] = strconv.FormatUint(end+uint64(late*1e9), 10)
			}
		}
	}
	return encode(m)
}
