package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Ports of P4's scraping job: the vLLM stand-in the job starts, and the
// node_exporter the bench starts for it.
const (
	vllmPort         = "17850"
	nodeExporterPort = "17851"
	nodeExporterBin  = "/usr/bin/prometheus-node-exporter"
)

// stopNodeExporter stops the bench's node_exporter, if one runs; teardown
// calls it too, so that Ctrl-C leaves nothing behind.
var stopNodeExporter = func() {}

// startNodeExporter starts Debian's node_exporter on 127.0.0.1:port and
// waits until it answers. It returns false (and no error) when it is not
// installed.
func startNodeExporter(port string) (bool, error) {
	if _, err := os.Stat(nodeExporterBin); err != nil {
		return false, nil
	}
	if err := portFree(port); err != nil {
		return false, err
	}
	logFile, err := os.Create(filepath.Join(benchBase, "node_exporter.log"))
	if err != nil {
		return false, err
	}
	cmd := exec.Command(nodeExporterBin, "--web.listen-address=127.0.0.1:"+port)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return false, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	stopNodeExporter = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		stopNodeExporter = func() {}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:" + port + "/metrics")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, nil
			}
		}
		if time.Now().After(deadline) {
			stopNodeExporter()
			return false, fmt.Errorf("node_exporter on 127.0.0.1:%s did not answer within 10 s: %v", port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// portFree fails when something already listens on 127.0.0.1:port.
func portFree(port string) error {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		return fmt.Errorf("port %s is taken: %v", port, err)
	}
	return l.Close()
}

// runIdleScrape is P4's idle job as a Gym job has it: a Gym config with one
// vllm service, whose stand-in the job script starts, and node_exporter's
// port, so that the collector scrapes both every scrape interval. The bench
// waits `warm` from the script's first line (at least 3 intervals) and
// until the stand-in has been scraped 3 times, so that the scrape path has
// run, then samples the collector's memory every second for `window`.
func runIdleScrape(warm, window time.Duration) (Row, error) {
	var row Row
	if err := waitIdle(60 * time.Second); err != nil {
		return row, err
	}
	if err := portFree(vllmPort); err != nil {
		return row, err
	}
	withNode, err := startNodeExporter(nodeExporterPort)
	if err != nil {
		return row, err
	}
	defer stopNodeExporter()
	nodeItem, targets := "", "a vLLM stand-in"
	if withNode {
		nodeItem, targets = ",node_metrics_port="+nodeExporterPort, "a vLLM stand-in and node_exporter"
	} else {
		logf("P4: %s not installed: the scraping job scrapes the vLLM stand-in only", nodeExporterBin)
	}

	tag := "p4s-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(jobsDir, tag)
	gymCfg := base + ".gym.yaml"
	if err := os.WriteFile(gymCfg, []byte(fmt.Sprintf(`compute:
  bench: {}
driver:
  gym_install: /opt/gym
job:
  output_path: %s.run
services:
  policy:
    type: vllm
    port: %s
    served_model_name: bench-model
`, base, vllmPort)), 0o644); err != nil {
		return row, err
	}
	// The job idles until the bench has its samples (at most `hold`).
	hold := int((warm + window + 60*time.Second).Seconds())
	done := base + ".done"
	script, err := writeScript("p4s.sh", fmt.Sprintf(`touch %[1]s/p4s.$SLURM_JOB_ID
%[2]s/vllm-standin --port %[3]s --model bench-model --scrape-log "$1" &
timeout %[4]d bash -c 'until [ -e "$0" ]; do sleep 0.5; done' "$2"
`, jobsDir, installDir, vllmPort, hold))
	if err != nil {
		return row, err
	}
	id, _, err := sbatch(fmt.Sprintf("-N1 -o %s.out --gym-otel=config=%s,benchmark=p4%s %s %s.scrapes %s",
		base, gymCfg, nodeItem, script, base, done), true)
	if err != nil {
		return row, err
	}
	mark := filepath.Join(jobsDir, "p4s."+id)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return row, fmt.Errorf("P4 scraping job %s never started", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	started := time.Now()
	otelDir := base + ".run/otel"
	col := findCollector(installDir, otelDir)
	if len(col) != 1 {
		return row, fmt.Errorf("P4 scraping job %s: collector processes %v", id, col)
	}
	scraped := func() int {
		sl, _ := os.ReadFile(base + ".scrapes")
		return len(strings.Fields(string(sl)))
	}
	time.Sleep(time.Until(started.Add(warm)))
	for scraped() < 3 {
		if time.Since(started) > warm+30*time.Second {
			return row, fmt.Errorf("P4 scraping job %s: the vLLM stand-in was scraped %d times in %v", id, scraped(), time.Since(started).Round(time.Second))
		}
		time.Sleep(200 * time.Millisecond)
	}
	from, s0 := time.Since(started), scraped()
	var samples []memOf
	for t := time.Now(); time.Since(t) < window; {
		m, err := readMem(col[0])
		if err != nil {
			return row, fmt.Errorf("P4 scraping job %s: collector gone while sampling: %v", id, err)
		}
		samples = append(samples, m)
		time.Sleep(time.Second)
	}
	to, s1 := time.Since(started), scraped()
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return row, err
	}
	if _, err := waitGone(id, 200*time.Millisecond, 120*time.Second); err != nil {
		return row, err
	}
	var trace []string
	for i, m := range samples {
		if i%10 == 0 || i == len(samples)-1 {
			trace = append(trace, fmt.Sprintf("%.1f/%.1f/%.1f", m.RSS/1024, m.Anon/1024, m.File/1024))
		}
	}
	logf("P4 scraping job %s: VmRSS/RssAnon/RssFile MiB every 10 s from %.0f s (after %d scrapes) to %.0f s (%d): %s",
		id, from.Seconds(), s0, to.Seconds(), s1, strings.Join(trace, " "))

	// The scrapes really happened: the stand-in logged them, and both
	// targets' metrics are in the job's metrics.jsonl.
	scrapes := scraped()
	metrics, err := os.ReadFile(filepath.Join(otelDir, "metrics.jsonl"))
	if err != nil {
		return row, fmt.Errorf("P4 scraping job %s: %v", id, err)
	}
	if scrapes < 3 || !bytes.Contains(metrics, []byte("num_requests_running")) {
		return row, fmt.Errorf("P4 scraping job %s: vLLM stand-in scraped %d times, its metrics in metrics.jsonl: %v",
			id, scrapes, bytes.Contains(metrics, []byte("num_requests_running")))
	}
	if withNode && !bytes.Contains(metrics, []byte(`"name":"node_`)) {
		return row, fmt.Errorf("P4 scraping job %s: no node_exporter metric in metrics.jsonl", id)
	}
	logf("P4 scraping job %s: vLLM stand-in scraped %d times; %d memory samples", id, scrapes, len(samples))

	mib := func(kib float64) float64 { return kib / 1024 }
	pick := func(f func(memOf) float64) []float64 {
		var v []float64
		for _, m := range samples {
			v = append(v, f(m))
		}
		return v
	}
	fig, pss, anon := p4Figure(samples)
	plo, phi := minmax(pick(func(m memOf) float64 { return m.PSS }))
	_, rhi := minmax(pick(func(m memOf) float64 { return m.RSS }))
	last := samples[len(samples)-1]
	row = Row{
		ID: "P4", What: fmt.Sprintf("collector memory per node, idle, scraping %s every %d s (PSS, RssAnon; the plugin's group, VmRSS, RssFile)", targets, scrapeInterval),
		Figure: fmt.Sprintf("%s; last sample PSS %.1f, anon %.1f", fig, mib(last.PSS), mib(last.Anon)),
		Spread: fmt.Sprintf("PSS %.1f-%.1f MiB over %d samples, %.0f-%.0f s after start (scrapes %d-%d); highest VmRSS %.1f MiB (<= 80, issue 29: %s)",
			mib(plo), mib(phi), len(samples), from.Seconds(), to.Seconds(), s0, s1, mib(rhi), yes(mib(rhi) <= 80)),
		Target: p4Target, Met: p4Met(pss, anon),
	}
	return row, nil
}
