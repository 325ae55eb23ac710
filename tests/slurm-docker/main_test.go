package slurmdocker

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// The names in every task env of a --gym-otel job.
var gymVars = []string{
	"NEMO_GYM_OTEL_ENABLED", "NEMO_GYM_OTEL_RUN_ID", "NEMO_GYM_OTEL_SPAN_GROUPS",
	"NEMO_GYM_OTEL_LOGS_ENABLED", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
}

// Slurm's and the plugin's names for the token, none of which a task sees.
var tokenVars = []string{"OTEL_TOKEN", "GYM_OTEL_TOKEN", "SPANK_GYM_OTEL_TOKEN", "SLURM_SPANK_GYM_OTEL_TOKEN"}

const standins = "/opt/gym-standins"

// mainJobScript: a vLLM stand-in on each node (srun in the background), a
// Gym "resources" server on the second node, then the driver (the Gym
// stand-in agent with sandbox spans) on the batch node, exiting with rc.
// Every task records when it started and its env. The rollouts last 260
// ms (resources) and 1010 ms (agent) of sleeps: well inside the SDK
// histogram's buckets (250, 500] and (1000, 2500] on a loaded machine too.
func mainJobScript(dir string, rc int) string {
	return fmt.Sprintf(`#!/bin/bash
D=%[1]s
now() { date -u +%%Y-%%m-%%dT%%H:%%M:%%S.%%NZ; }
now > $D/first.batch
env > $D/env.batch
srun -N2 --ntasks-per-node=1 --overlap bash -c '
  date -u +%%Y-%%m-%%dT%%H:%%M:%%S.%%NZ > %[1]s/first.vllm.$SLURMD_NODENAME
  env > %[1]s/env.vllm.$SLURMD_NODENAME
  exec %[2]s/vllm-standin --port 8000 --model tiny-model --scrape-log %[1]s/scrapes.$SLURMD_NODENAME' &
# The services are up once each node's collector has scraped its stand-in.
for i in $(seq 1 1200); do
  [ -s $D/scrapes.c1 ] && [ -s $D/scrapes.c2 ] && break
  sleep 0.1
done
srun -N1 -w c2 --overlap bash -c 'env > %[1]s/env.resources.$SLURMD_NODENAME; exec %[2]s/gym-standin --server resources --rollouts 2 --rollout-duration 260ms --sandbox-provider docker' || exit 90
%[2]s/gym-standin --server agent --rollouts 6 --rollout-duration 1010ms --sandbox-provider docker --exit-code %[3]d
rc=$?
now > $D/driver.exit
exit $rc
`, dir, standins, rc)
}

// stageConfig writes a resolved NeMo Gym submit config into the job dir, as
// gym eval submit stages it: one vLLM service on port 8000, sandbox spans on.
func stageConfig(t testing.TB, host, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(host, "submit.yaml"), fmt.Sprintf(`# A resolved NeMo Gym submit config, as gym eval submit stages it.
compute:
  dockerlab: {}
driver:
  gym_install: /opt/gym
job:
  output_path: %s
services:
  policy:
    type: vllm
    port: 8000
    served_model_name: tiny-model
otel:
  gym_span_groups: default,verify,sandbox
`, dir), 0o644)
}

// The main job of the feature, end to end on two nodes: see the checks.
func TestMainJob(t *testing.T) {
	c := need(t)
	c.switchVariant(t, "alloc")
	c.waitIdle(t, 60*time.Second)
	host, dir := c.jobDir(t, "main")
	runID := "run-" + filepath.Base(dir)
	stageConfig(t, host, dir)
	writeFile(t, filepath.Join(host, "job.sh"), mainJobScript(dir, 7), 0o755)

	start := time.Now()
	jobID := c.sbatch(t, c.tokenEnv(), dir, fmt.Sprintf(
		"-N2 --gym-otel=config=%s/submit.yaml,run_id=%s,benchmark=gsm8k -o %s/slurm-%%j.out job.sh", dir, runID, dir))
	otelDir := map[string]string{"c1": filepath.Join(host, "otel"), "c2": filepath.Join(host, "otel", "nodes", "c2")}
	// While it runs: each node's packet filter keeps the job's ports to it.
	filter := c.watchPortFilter(jobID, host, map[string]string{"c1": "first.batch", "c2": "first.vllm.c2"}, otelDir)
	state, exit := c.waitJob(t, jobID, 180*time.Second)
	fs := <-filter
	for _, e := range fs.errs {
		t.Error("packet filter: " + e)
	}
	for _, l := range fs.seen {
		t.Log("packet filter: " + l)
	}
	if c.portFilter != "on" {
		t.Logf("the nodes run without the packet filter (GOS_PORT_FILTER=%s: up.sh says why)", c.portFilter)
	}
	out, _ := os.ReadFile(filepath.Join(host, "slurm-"+jobID+".out"))
	t.Logf("job %s: %s %s after %v; output:\n%s", jobID, state, exit, time.Since(start).Round(time.Millisecond), out)
	if state != "FAILED" || exit != "7:0" {
		t.Fatalf("job %s: %s ExitCode=%s, want FAILED with the driver's 7:0", jobID, state, exit)
	}
	if n := strings.Count(string(out), "flush=ok"); n != 2 {
		t.Errorf("want both Gym stand-ins to report flush=ok, got %d", n)
	}

	// One collector per node, each ready before that node's first task.
	firstTask := map[string]time.Time{"c1": testenv.ReadTime(t, filepath.Join(host, "first.batch")),
		"c2": testenv.ReadTime(t, filepath.Join(host, "first.vllm.c2"))}
	for _, n := range []string{"c1", "c2"} {
		log := c.slurmdLog(t, n)
		if k := strings.Count(log, "gym-otel: job "+jobID+": collector ready on "); k != 1 {
			t.Errorf("%s: %d collector ready lines for job %s, want 1", n, k, jobID)
		}
		ready, ok := logTime(log, `gym-otel: job `+jobID+`: collector ready on `+n+` `)
		if !ok {
			t.Errorf("%s: no collector ready line", n)
		} else if !ready.Before(firstTask[n]) {
			t.Errorf("%s: collector ready at %v, the node's first task started at %v", n, ready, firstTask[n])
		}
		if !regexp.MustCompile(`gym-otel: job ` + jobID + `: supervisor \(pid \d+\) stopped in`).MatchString(log) {
			t.Errorf("%s: the epilog did not log the supervisor's stop", n)
		}
	}

	// Every task has the Gym env pointing at its own node's collector (the
	// port in that node's state.json), and no token.
	port := map[string]string{}
	for n, d := range otelDir {
		st, err := os.ReadFile(filepath.Join(d, "state.json"))
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		m := regexp.MustCompile(`"otlp_http": (\d+)`).FindSubmatch(st)
		if m == nil {
			t.Fatalf("%s: no otlp_http port in state.json: %s", n, st)
		}
		port[n] = string(m[1])
	}
	for file, n := range map[string]string{"env.batch": "c1", "env.vllm.c1": "c1", "env.vllm.c2": "c2", "env.resources.c2": "c2"} {
		data, err := os.ReadFile(filepath.Join(host, file))
		if err != nil {
			t.Error(err)
			continue
		}
		if strings.Contains(string(data), c.token) {
			t.Errorf("%s: the token's value is in the task env", file)
		}
		env := testenv.EnvOf(string(data))
		for _, k := range gymVars {
			if env[k] == "" {
				t.Errorf("%s: %s missing", file, k)
			}
		}
		for _, k := range tokenVars {
			if _, ok := env[k]; ok {
				t.Errorf("%s: %s is in the task env", file, k)
			}
		}
		if want := "http://127.0.0.1:" + port[n]; env["OTEL_EXPORTER_OTLP_ENDPOINT"] != want {
			t.Errorf("%s (on %s): OTEL_EXPORTER_OTLP_ENDPOINT=%q, want %s (that node's collector)", file, n, env["OTEL_EXPORTER_OTLP_ENDPOINT"], want)
		}
		if env["NEMO_GYM_OTEL_RUN_ID"] != runID || env["NEMO_GYM_OTEL_ENABLED"] != "1" {
			t.Errorf("%s: NEMO_GYM_OTEL_RUN_ID=%q NEMO_GYM_OTEL_ENABLED=%q", file, env["NEMO_GYM_OTEL_RUN_ID"], env["NEMO_GYM_OTEL_ENABLED"])
		}
		if !strings.Contains(env["NEMO_GYM_OTEL_SPAN_GROUPS"], "sandbox") {
			t.Errorf("%s: NEMO_GYM_OTEL_SPAN_GROUPS=%q (the config asked for sandbox)", file, env["NEMO_GYM_OTEL_SPAN_GROUPS"])
		}
	}
	if _, err := os.Stat(filepath.Join(host, "otel", "nodes", "c1")); err == nil {
		t.Errorf("the first node wrote otel/nodes/c1 too")
	}

	// The files of each node: complete, identity on every resource, vLLM
	// renamed with its types, node_exporter told apart by host.name.
	ident := map[string]string{"user": jobUser, "run_id": runID, "slurm_job_id": jobID, "slurm_job_restart_count": "0", "benchmark": "gsm8k",
		"cluster": "dockerlab", "model": "tiny-model", "service.name": "gym-docker-test"}
	files := map[string][]item{}
	for n, d := range otelDir {
		for _, f := range []string{"collector.yaml", "metrics.jsonl", "traces.jsonl", "logs.jsonl", "state.json", "collector.log"} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				t.Errorf("%s: %v", n, err)
			}
		}
		var all []item
		for _, sig := range []string{"metrics", "traces", "logs"} {
			all = append(all, readOTLP(t, filepath.Join(d, sig+".jsonl"))...)
		}
		files[n] = all
		checkNode(t, n, all, ident)
		if st, _ := os.ReadFile(filepath.Join(d, "state.json")); !strings.Contains(string(st), `"drained"`) {
			t.Errorf("%s: state.json is not drained: %s", n, st)
		}
	}
	// Spans of both Gym servers, sandbox spans with their provider, logs
	// with trace ids, span metrics keyed by span name.
	for n, server := range map[string]string{"c1": "nemo-gym/agent", "c2": "nemo-gym/resources"} {
		all := files[n]
		spans := find(all, func(it item) bool { return it.signal == "span" && it.res["service.name.override"] == server })
		if len(find(spans, func(it item) bool { return it.name == "gym.rollout" })) == 0 {
			t.Errorf("%s: no gym.rollout span of %s", n, server)
		}
		sb := find(spans, func(it item) bool { return it.name == "sandbox.exec" })
		if len(sb) == 0 || !anyPoint(sb, "nemo.gym.sandbox.provider", "docker") {
			t.Errorf("%s: no sandbox.exec span with nemo.gym.sandbox.provider=docker of %s", n, server)
		}
		logs := find(all, func(it item) bool {
			return it.signal == "log" && it.res["service.name.override"] == server && it.traceID != ""
		})
		if len(logs) == 0 {
			t.Errorf("%s: no log record with a trace id from %s", n, server)
		}
		calls := find(all, metricNamed("traces.span.metrics.calls"))
		if !anyPoint(calls, "span.name", "sandbox.exec") || !anyPoint(calls, "nemo.gym.sandbox.provider", "docker") {
			t.Errorf("%s: no span metrics for sandbox.exec keyed by provider", n)
		}
	}
	if len(find(files["c1"], metricNamed("gym.rollout.duration_ms"))) == 0 {
		t.Errorf("c1: no gym.rollout.duration_ms")
	}

	// Each node's receipt: final figures, nothing lost, per signal written
	// = the items in that node's files, and (the default delivery from
	// the files) the supervisor's delivery acknowledged every item of
	// them.
	for n, d := range otelDir {
		rc, err := receipt.Read(d)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		t.Logf("%s:\n%s", n, strings.Join(rc.Summary(), "\n"))
		count := map[string]int64{}
		for _, it := range files[n] {
			switch it.signal {
			case "span":
				count["traces"]++
			case "log":
				count["logs"]++
			case "metric":
				count["metrics"] += int64(len(it.attrs))
			}
		}
		// Two collector runs: the final scrape at the script's end stops
		// the first (it scrapes every target as it stops) and starts the
		// second.
		if !rc.Complete() || rc.Trouble() || rc.JobID != jobID || rc.Node != n || rc.Collectors != 2 {
			t.Errorf("%s: receipt %+v: want final figures of job %s on %s from 2 collector runs without trouble", n, rc, jobID, n)
		}
		// The drain's and the epilog's spans, appended after the
		// collector's exit, are the receipt's own (Appended), not its
		// figures'.
		if a := rc.AppendedSpans(); a != 2 {
			t.Errorf("%s: the receipt lists %d appended spans (%+v), want the drain's and the epilog's", n, a, rc.Appended)
		}
		inFiles := count["traces"] + count["metrics"] + count["logs"]
		if d := rc.Delivery; d == nil || !d.Complete() || d.Accepted != inFiles || d.Rejected != 0 {
			t.Errorf("%s: receipt's delivery %+v: want all %d items of the files acknowledged, nothing past the checkpoint", n, rc.Delivery, inFiles)
		}
		count["traces"] -= rc.AppendedSpans()
		count["metrics"] -= rc.AppendedPoints() // their span metrics
		// The collector has no backend exporter: it sent nothing itself;
		// node_exporter's series outside local_node_metrics, kept out of
		// the file, reach neither the file nor the backend.
		for _, sig := range []string{"traces", "metrics", "logs"} {
			if c := rc.Signals[sig]; c.Written != count[sig] || c.Sent != 0 || c.Lost() != 0 {
				t.Errorf("%s: receipt %s %+v: want written = %d (the file's items), nothing sent or lost by the collector", n, sig, c, count[sig])
			}
		}
		if c := rc.Signals["metrics"]; c.FileFiltered == 0 {
			t.Errorf("%s: receipt metrics %+v: no node_exporter series kept out of the file by local_node_metrics", n, c)
		}
	}

	// Every file the job wrote is the job user's.
	_ = filepath.Walk(host, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		if uid, gid := owner(fi); uid != jobUID || gid != jobUID {
			t.Errorf("%s is owned by %d:%d, not the job user", p, uid, gid)
		}
		return nil
	})

	// The final scrape: each vLLM stand-in was scraped after the driver exited.
	driverExit := testenv.ReadTime(t, filepath.Join(host, "driver.exit"))
	for _, n := range []string{"c1", "c2"} {
		last, err := time.Parse(time.RFC3339Nano, lastLine(t, filepath.Join(host, "scrapes."+n)))
		if err != nil {
			t.Fatal(err)
		}
		if !last.After(driverExit) {
			t.Errorf("%s: last scrape %v is not after the driver's exit %v", n, last, driverExit)
		}
	}

	// Nothing left on any node; both idle.
	c.waitNothingLeft(t, jobID)
	c.waitIdle(t, 30*time.Second)

	// inspect reports both nodes' figures, and its HTML report draws them.
	checkInspect(t, host, jobID)

	// The backend received all of it (it accepts only the token); its files
	// are written as it receives, so poll briefly.
	c.checkBackendAuth(t)
	deadline := time.Now().Add(patience)
	for {
		errs := c.backendHasJob(t, jobID, ident)
		if len(errs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, e := range errs {
				t.Error("backend: " + e)
			}
			break
		}
		time.Sleep(500 * time.Millisecond)
	}

	// The token's value is nowhere in the job dir, the Slurm logs or the
	// collectors' logs.
	for _, root := range []string{host, filepath.Join(c.work, "log")} {
		if hits := scanFor(root, c.token); len(hits) > 0 {
			t.Errorf("the token's value is in %v", hits)
		}
	}
	for _, n := range []string{"c1", "c2"} {
		if out, err := c.on(n, "grep", "-rlF", c.token, "/run/gym-otel", "/var/log/slurm", "/tmp"); err == nil {
			t.Errorf("%s: the token's value is in %s", n, out)
		}
	}
}

// checkNode: everything of one node's files carries the identity and that
// node's host.name; vLLM metrics renamed with their types; node_exporter
// series present.
func checkNode(t *testing.T, node string, all []item, ident map[string]string) {
	t.Helper()
	if len(all) == 0 {
		t.Errorf("%s: no telemetry", node)
		return
	}
	bad := 0
	for _, it := range all {
		for k, v := range ident {
			if it.res[k] != v && bad < 5 {
				bad++
				t.Errorf("%s: a %s %q has resource %s=%q, want %q", node, it.signal, it.name, k, it.res[k], v)
			}
		}
		if it.res["host.name"] != node && bad < 5 {
			bad++
			t.Errorf("%s: a %s %q has host.name=%q", node, it.signal, it.name, it.res["host.name"])
		}
		if it.res["service.name.override"] == "" && bad < 5 {
			bad++
			t.Errorf("%s: a %s %q has no service.name.override", node, it.signal, it.name)
		}
		if strings.HasPrefix(it.name, "vllm:") {
			t.Errorf("%s: metric %s not renamed", node, it.name)
		}
	}
	types := map[string]string{"vllm_num_requests_running": "gauge", "vllm_prompt_tokens_total": "sum",
		"vllm_e2e_request_latency_seconds": "histogram"}
	for name, typ := range types {
		ms := find(all, metricNamed(name))
		if len(ms) == 0 {
			t.Errorf("%s: no %s", node, name)
			continue
		}
		for _, m := range ms {
			if m.mtype != typ || (typ == "sum" && !m.monotonic) {
				t.Errorf("%s: %s is a %s (monotonic %v), want %s", node, name, m.mtype, m.monotonic, typ)
				break
			}
			if m.res["service.name.override"] != "gym-vllm/policy" {
				t.Errorf("%s: %s service.name.override=%q", node, name, m.res["service.name.override"])
				break
			}
		}
	}
	nodeSeries := find(all, func(it item) bool {
		return it.signal == "metric" && strings.HasPrefix(it.name, "node_") && it.res["service.name.override"] == "node"
	})
	if len(nodeSeries) == 0 {
		t.Errorf("%s: no node_exporter series", node)
	}
}

// checkBackendAuth: the backend refuses OTLP without the token, so what it
// holds came with it.
func (c *cluster) checkBackendAuth(t *testing.T) {
	t.Helper()
	for _, hdr := range []string{"", "Bearer wrong-token"} {
		req, _ := http.NewRequest("POST", "http://"+c.net+".20:4318/v1/metrics", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("backend: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("backend answered %d to Authorization %q, want 401", resp.StatusCode, hdr)
		}
	}
}

// backendHasJob lists what the backend is missing of job id.
func (c *cluster) backendHasJob(t *testing.T, jobID string, ident map[string]string) []string {
	var all []item
	for _, sig := range []string{"metrics", "traces", "logs"} {
		all = append(all, readOTLPLenient(t, filepath.Join(c.work, "backend", sig+".jsonl"))...)
	}
	job := find(all, func(it item) bool { return it.res["slurm_job_id"] == jobID })
	var errs []string
	for _, it := range job {
		for k, v := range ident {
			if it.res[k] != v {
				errs = append(errs, fmt.Sprintf("a %s %q has %s=%q", it.signal, it.name, k, it.res[k]))
				return errs
			}
		}
	}
	for _, n := range []string{"c1", "c2"} {
		on := find(job, func(it item) bool { return it.res["host.name"] == n })
		for _, want := range []string{"vllm_e2e_request_latency_seconds", "traces.span.metrics.calls"} {
			if len(find(on, metricNamed(want))) == 0 {
				errs = append(errs, fmt.Sprintf("no %s from %s", want, n))
			}
		}
		if len(find(on, func(it item) bool { return strings.HasPrefix(it.name, "node_") })) == 0 {
			errs = append(errs, "no node_exporter series from "+n)
		}
		if len(find(on, func(it item) bool { return it.signal == "span" && it.name == "sandbox.exec" })) == 0 {
			errs = append(errs, "no sandbox.exec span from "+n)
		}
		if len(find(on, func(it item) bool { return it.signal == "log" })) == 0 {
			errs = append(errs, "no log record from "+n)
		}
	}
	return errs
}

// readOTLPLenient is readOTLP for a file still being written: a partial
// last line is left for the next poll.
func readOTLPLenient(t *testing.T, path string) []item {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	if i := strings.LastIndexByte(string(data), '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		return nil
	}
	tmp := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return readOTLP(t, tmp)
}
