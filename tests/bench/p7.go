package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// P7: `gym-otel-spank inspect` of a job with 1 GB of jsonl over two nodes,
// in wall seconds and peak RSS (the child's ru_maxrss). The files are
// generated once (kept under the bench's state dir for later runs) as the
// collector's file exporter writes them: one OTLP-JSON request per line,
// metrics from a vLLM, a dcgm-exporter and a node_exporter scrape per
// second and node, spans of Gym rollouts in batches, log records.

const (
	p7Dir      = "/var/lib/gym-otel-bench/inspect-1g"
	p7PerNode  = 500 << 20 // bytes of jsonl per node
	p7Nodes    = 2
	p7MetricsF = 0.70 // share of metrics.jsonl in a node's bytes
	p7TracesF  = 0.25
	// P7N: the same gigabyte over 64 nodes (16 MiB each), the shape of an
	// RL job at scale: 64 node dirs, 64 servers, 512 GPUs, 64 hosts.
	p7NDir     = "/var/lib/gym-otel-bench/inspect-1g-64"
	p7NPerNode = 16 << 20
	p7NNodes   = 64
)

func runP7() ([]Row, error) { return runP7At("P7", p7Dir, p7Nodes, p7PerNode) }

// runP7N is P7 over 64 nodes (GYM_OTEL_BENCH_ONLY=P7N runs it alone).
func runP7N() ([]Row, error) { return runP7At("P7N", p7NDir, p7NNodes, p7NPerNode) }

// runP7At measures inspect --json of a job of nodes node dirs of perNode
// bytes of jsonl each, generated under base once.
func runP7At(id, base string, nodes int, perNode int64) ([]Row, error) {
	job := filepath.Join(base, "job")
	dirs := []string{filepath.Join(job, "otel")}
	for i := 2; i <= nodes; i++ {
		dirs = append(dirs, filepath.Join(job, "otel", "nodes", fmt.Sprintf("gn%d", i)))
	}
	var total int64
	for i, d := range dirs {
		n, err := p7Generate(d, fmt.Sprintf("gn%d", i+1), perNode)
		if err != nil {
			return nil, err
		}
		total += n
	}
	cli := filepath.Join(repo, "build/gym-otel-spank")
	var secsV, rssV []float64
	for round := 0; round < 3; round++ {
		cmd := exec.Command(cli, "inspect", "--json", "--no-sacct", job)
		cmd.Stdout = nil
		var stderr strings.Builder
		cmd.Stderr = &stderr
		t0 := time.Now()
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s: %s inspect: %v %s", id, cli, err, stderr.String())
		}
		secsV = append(secsV, time.Since(t0).Seconds())
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		rssV = append(rssV, float64(ru.Maxrss)/1024) // KiB -> MiB
		logf("%s: round %d: %.1f s, peak RSS %.0f MiB", id, round+1, secsV[len(secsV)-1], rssV[len(rssV)-1])
	}
	smin, smax := minmax(secsV)
	rmin, rmax := minmax(rssV)
	gb := float64(total) / (1 << 30)
	return []Row{
		{id, fmt.Sprintf("inspect --json of %.2f GiB jsonl, %d nodes: wall time", gb, nodes), fmt.Sprintf("%.1f s", median(secsV)),
			fmt.Sprintf("%.1f-%.1f s (3 runs)", smin, smax), "< 30 s", met(median(secsV) < 30)},
		{id, "inspect --json of the same: peak RSS", fmt.Sprintf("%.0f MiB", median(rssV)),
			fmt.Sprintf("%.0f-%.0f MiB", rmin, rmax), "< 200 MiB", met(rmax < 200)},
	}, nil
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

// p7Generate writes dir's three files of perNode bytes together (unless
// they are there at full size) and returns their total size.
func p7Generate(dir, node string, perNode int64) (int64, error) {
	targets := map[string]int64{
		"metrics": int64(p7MetricsF * float64(perNode)),
		"traces":  int64(p7TracesF * float64(perNode)),
		"logs":    int64((1 - p7MetricsF - p7TracesF) * float64(perNode)),
	}
	var total int64
	done := true
	for sig, want := range targets {
		st, err := os.Stat(filepath.Join(dir, sig+".jsonl"))
		if err != nil || st.Size() < want {
			done = false
			break
		}
		total += st.Size()
	}
	if done {
		return total, nil
	}
	total = 0
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	logf("P7: generating %s (%d MiB)", dir, perNode>>20)
	for sig, want := range targets {
		n, err := p7Write(filepath.Join(dir, sig+".jsonl"), want, func(w *bufio.Writer, i int) {
			switch sig {
			case "metrics":
				p7Metrics(w, node, i)
			case "traces":
				p7Spans(w, node, i)
			default:
				p7Logs(w, node, i)
			}
		})
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func p7Write(path string, want int64, line func(*bufio.Writer, int)) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 1<<16)
	for i := 0; cw.n < want; i++ {
		line(bw, i)
		bw.WriteByte('\n')
		if i%64 == 0 {
			bw.Flush()
		}
	}
	bw.Flush()
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	return cw.n, f.Close()
}

type countWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

const p7Start = int64(1795949147000000000) // ns

func p7Resource(w *bufio.Writer, node, producer, instance string) {
	fmt.Fprintf(w, `{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"my-eval"}},`+
		`{"key":"service.instance.id","value":{"stringValue":%q}},{"key":"service.name.override","value":{"stringValue":%q}},`+
		`{"key":"user","value":{"stringValue":"alice"}},{"key":"run_id","value":{"stringValue":"r1"}},{"key":"slurm_job_id","value":{"stringValue":"4242"}},`+
		`{"key":"slurm_job_restart_count","value":{"intValue":"0"}},{"key":"cluster","value":{"stringValue":"eos"}},{"key":"host.name","value":{"stringValue":%q}}]},`,
		instance, producer, node)
}

func p7Gauge(w *bufio.Writer, name string, ns int64, labels string, v float64) {
	fmt.Fprintf(w, `{"name":%q,"gauge":{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","asDouble":%g}]}}`, name, labels, ns, v)
}

func p7Counter(w *bufio.Writer, name string, ns int64, labels string, v float64) {
	fmt.Fprintf(w, `{"name":%q,"sum":{"dataPoints":[{"attributes":[%s],"startTimeUnixNano":"%d","timeUnixNano":"%d","asDouble":%g}],"aggregationTemporality":2,"isMonotonic":true}}`,
		name, labels, p7Start, ns, v)
}

func p7Hist(w *bufio.Writer, name string, ns int64, labels string, n int, bounds string, nb int) {
	var b strings.Builder
	for i := 0; i <= nb; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%d"`, n*(i+1)/(nb+1)/(nb+1)+i)
	}
	fmt.Fprintf(w, `{"name":%q,"histogram":{"dataPoints":[{"attributes":[%s],"startTimeUnixNano":"%d","timeUnixNano":"%d","count":"%d","sum":%g,"bucketCounts":[%s],"explicitBounds":[%s]}],"aggregationTemporality":2}}`,
		name, labels, p7Start, ns, n, float64(n)*0.9, b.String(), bounds)
}

// p7Metrics writes round i's scrape of one of the node's three targets.
func p7Metrics(w *bufio.Writer, node string, i int) {
	ns := p7Start + int64(i/3)*1e9
	w.WriteString(`{"resourceMetrics":[`)
	switch i % 3 {
	case 0:
		p7Resource(w, node, "gym-vllm/policy", node+":8000")
		w.WriteString(`"scopeMetrics":[{"scope":{"name":"github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver"},"metrics":[`)
		l := `{"key":"engine","value":{"stringValue":"0"}},{"key":"model_name","value":{"stringValue":"llama-3-8b"}}`
		k := i / 3
		p7Gauge(w, "vllm_num_requests_running", ns, l, float64(k%7))
		w.WriteByte(',')
		p7Gauge(w, "vllm_num_requests_waiting", ns, l, float64(k%3))
		w.WriteByte(',')
		p7Gauge(w, "vllm_kv_cache_usage_perc", ns, l, float64(k%100)/100)
		w.WriteByte(',')
		p7Counter(w, "vllm_prompt_tokens_total", ns, l, float64(k*1200))
		w.WriteByte(',')
		p7Counter(w, "vllm_generation_tokens_total", ns, l, float64(k*800))
		w.WriteByte(',')
		p7Counter(w, "vllm_request_success_total", ns, l, float64(k*4))
		w.WriteByte(',')
		p7Hist(w, "vllm_e2e_request_latency_seconds", ns, l, k*4, "0.3,0.5,0.8,1,1.5,2,2.5,5,10,15,20,30,40,50,60", 15)
		w.WriteByte(',')
		p7Hist(w, "vllm_time_to_first_token_seconds", ns, l, k*4, "0.001,0.005,0.01,0.02,0.04,0.06,0.08,0.1,0.25,0.5,0.75,1,2.5,5,7.5,10", 16)
		w.WriteByte(',')
		p7Gauge(w, "up", ns, "", 1)
	case 1:
		p7Resource(w, node, "dcgm", node+":9400")
		w.WriteString(`"scopeMetrics":[{"scope":{"name":"github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver"},"metrics":[`)
		for g := 0; g < 8; g++ {
			l := fmt.Sprintf(`{"key":"gpu","value":{"stringValue":"%d"}},{"key":"UUID","value":{"stringValue":"GPU-5fd4c1a0-0000-4000-8000-%012d"}},`+
				`{"key":"device","value":{"stringValue":"nvidia%d"}},{"key":"modelName","value":{"stringValue":"NVIDIA H100 80GB HBM3"}},{"key":"Hostname","value":{"stringValue":%q}}`, g, g, g, node)
			if g > 0 {
				w.WriteByte(',')
			}
			p7Gauge(w, "DCGM_FI_DEV_GPU_UTIL", ns, l, float64((i+g*13)%101))
			w.WriteByte(',')
			p7Gauge(w, "DCGM_FI_DEV_FB_USED", ns, l, float64(20000+(i*97)%50000))
			w.WriteByte(',')
			p7Gauge(w, "DCGM_FI_DEV_POWER_USAGE", ns, l, 120.5+float64(i%500))
		}
		w.WriteByte(',')
		p7Gauge(w, "up", ns, "", 1)
	default:
		p7Resource(w, node, "node", node+":9100")
		w.WriteString(`"scopeMetrics":[{"scope":{"name":"github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver"},"metrics":[`)
		modes := []string{"idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user"}
		first := true
		for c := 0; c < 16; c++ {
			for m, mode := range modes {
				if !first {
					w.WriteByte(',')
				}
				first = false
				p7Counter(w, "node_cpu_seconds_total", ns, fmt.Sprintf(`{"key":"cpu","value":{"stringValue":"%d"}},{"key":"mode","value":{"stringValue":%q}}`, c, mode), float64(i/3)*float64(m+1)*0.1)
			}
		}
		w.WriteByte(',')
		p7Gauge(w, "node_memory_MemTotal_bytes", ns, "", 2.5e11)
		w.WriteByte(',')
		p7Gauge(w, "node_memory_MemAvailable_bytes", ns, "", 2e11-float64(i%1000)*1e6)
		w.WriteByte(',')
		p7Gauge(w, "node_load1", ns, "", float64(i%16))
		// The many node_exporter series the report does not read.
		for d := 0; d < 60; d++ {
			w.WriteByte(',')
			p7Gauge(w, "node_filesystem_avail_bytes", ns, fmt.Sprintf(`{"key":"device","value":{"stringValue":"/dev/sd%d"}},{"key":"fstype","value":{"stringValue":"ext4"}},{"key":"mountpoint","value":{"stringValue":"/mnt/%d"}}`, d, d), 1e12)
		}
		w.WriteByte(',')
		p7Gauge(w, "up", ns, "", 1)
	}
	w.WriteString(`]}]}]}`)
}

// p7Spans writes a batch of 128 spans: rollouts with their verify and
// sandbox children.
func p7Spans(w *bufio.Writer, node string, i int) {
	w.WriteString(`{"resourceSpans":[`)
	p7Resource(w, node, "nemo-gym/agent", "")
	w.WriteString(`"scopeSpans":[{"scope":{"name":"nemo_gym.lens"},"spans":[`)
	for s := 0; s < 128; s++ {
		k := i*128 + s
		start := p7Start + int64(k)*10e6
		name, dur := "gym.rollout", int64(300e6+int64(k%97)*1e6)
		switch s % 3 {
		case 1:
			name, dur = "gym.verify", 50e6+int64(k%13)*1e6
		case 2:
			name, dur = "sandbox.exec", 80e6+int64(k%17)*1e6
		}
		if s > 0 {
			w.WriteByte(',')
		}
		status := "{}"
		if k%1000 == 999 {
			status = `{"code":2,"message":"sandbox timeout"}`
		}
		fmt.Fprintf(w, `{"traceId":"%032x","spanId":"%016x","parentSpanId":"%016x","flags":257,"name":%q,"kind":1,"startTimeUnixNano":"%d","endTimeUnixNano":"%d",`+
			`"attributes":[{"key":"nemo.gym.run_id","value":{"stringValue":"r1"}},{"key":"nemo.gym.verify.result","value":{"stringValue":"pass"}},{"key":"nemo.gym.rollout.index","value":{"intValue":"%d"}}],"status":%s}`,
			k/3+1, k+1, k/3*3+1, name, start, start+dur, k/3, status)
	}
	w.WriteString(`]}]}]}`)
}

func p7Logs(w *bufio.Writer, node string, i int) {
	w.WriteString(`{"resourceLogs":[`)
	p7Resource(w, node, "nemo-gym/agent", "")
	w.WriteString(`"scopeLogs":[{"scope":{"name":"nemo_gym.lens"},"logRecords":[`)
	for s := 0; s < 64; s++ {
		k := i*64 + s
		ns := p7Start + int64(k)*30e6
		sev, text := 9, "INFO"
		if k%500 == 499 {
			sev, text = 17, "ERROR"
		}
		if s > 0 {
			w.WriteByte(',')
		}
		fmt.Fprintf(w, `{"timeUnixNano":"%d","observedTimeUnixNano":"%d","severityNumber":%d,"severityText":%q,"body":{"stringValue":"rollout %d finished: verify pass"},`+
			`"attributes":[{"key":"nemo.gym.run_id","value":{"stringValue":"r1"}}],"flags":1,"traceId":"%032x","spanId":"%016x"}`, ns, ns, sev, text, k, k/3+1, k+1)
	}
	w.WriteString(`]}]}]}`)
}
