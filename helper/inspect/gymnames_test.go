package inspect

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gymMetrics is one export of Gym's real instruments from one producer:
// verify success rate and the count of its verify duration histogram,
// rollouts by outcome, and model calls by dialect.
func gymMetrics(producer string, sec int, rate float64, verifies int, outcomes map[string]int, calls int) string {
	var ms []string
	ms = append(ms, fmt.Sprintf(`{"name":"gym.verify.success_rate","gauge":{"dataPoints":[{"timeUnixNano":"%d","asDouble":%v}]}}`, ns(sec), rate))
	ms = append(ms, fmt.Sprintf(`{"name":"gym.verify.duration_ms","unit":"ms","histogram":{"dataPoints":[{"timeUnixNano":"%d","count":"%d","sum":%d,"bucketCounts":["0","%d","0"],"explicitBounds":[10,100]}],"aggregationTemporality":2}}`, ns(sec), verifies, verifies*50, verifies))
	var pts []string
	for o, n := range outcomes {
		pts = append(pts, fmt.Sprintf(`{"attributes":[{"key":"nemo.gym.rollout.outcome","value":{"stringValue":%q}}],"timeUnixNano":"%d","asInt":"%d"}`, o, ns(sec), n))
	}
	ms = append(ms, fmt.Sprintf(`{"name":"gym.rollout.completed_total","sum":{"dataPoints":[%s],"aggregationTemporality":2,"isMonotonic":true}}`, strings.Join(pts, ",")))
	ms = append(ms, fmt.Sprintf(`{"name":"gym.model.call_duration_ms","unit":"ms","histogram":{"dataPoints":[{"attributes":[{"key":"nemo.gym.model.dialect","value":{"stringValue":"chat_completions"}}],"timeUnixNano":"%d","count":"%d","sum":%d,"bucketCounts":["0","0","%d"],"explicitBounds":[10,100]}],"aggregationTemporality":2}}`, ns(sec), calls, calls*200, calls))
	ms = append(ms, fmt.Sprintf(`{"name":"gym.http.retry_total","sum":{"dataPoints":[{"attributes":[{"key":"nemo.gym.http.retry_reason","value":{"stringValue":"timeout"}}],"timeUnixNano":"%d","asInt":"2"}],"aggregationTemporality":2,"isMonotonic":true}}`, ns(sec)))
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":%s,"scopeMetrics":[{"metrics":[%s]}]}]}`+"\n", res("gn1", producer, ""), strings.Join(ms, ","))
}

func writeGymJob(t *testing.T, metrics, traces string) string {
	t.Helper()
	job := t.TempDir()
	dir := filepath.Join(job, "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"metrics.jsonl": metrics, "traces.jsonl": traces} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return job
}

// TestGymRealNames: Gym's real names give verify success (weighted by each
// process's verifications), rollouts by outcome in both vocabularies,
// model-call latency by dialect and retries; the same run under the older
// span attribute-less shape gives success from span status.
func TestGymRealNames(t *testing.T) {
	// Cumulative points: the resources server made 30 verifications, 90 %
	// completed; the judge 10, 50 %: (27 + 5) / 40 = 0.8. Outcomes and
	// histograms are cumulative too (their last points count).
	m := gymMetrics("nemo-gym/math", 10, 0.5, 4, map[string]int{"success": 3, "failure": 1}, 4) +
		gymMetrics("nemo-gym/math", 20, 0.9, 30, map[string]int{"success": 27, "failure": 3}, 30) +
		gymMetrics("nemo-gym/judge", 20, 0.5, 10, map[string]int{"scored": 5, "dropped": 5}, 10)
	traces := spanLine("gn1",
		sp("gym.verify", "t1", 1, 40, "", ""),
		sp("gym.verify", "t2", 2, 60, "verifier raised", ""),
		sp("gym.sandbox.exec", "t1", 1, 30, "", `{"key":"nemo.gym.sandbox.provider","value":{"stringValue":"docker"}}`))
	r, err := Build(writeGymJob(t, m, traces))
	if err != nil {
		t.Fatal(err)
	}
	g := r.Gym
	if !near(g.VerifySuccess, 0.8) || g.Telemetry.VerifySource != "gym.verify.success_rate" {
		t.Errorf("verify success %v from %q, want 0.8 from gym.verify.success_rate", g.VerifySuccess, g.Telemetry.VerifySource)
	}
	o := g.Telemetry.RolloutOutcomes
	if o["success"] != 27 || o["failure"] != 3 || o["scored"] != 5 || o["dropped"] != 5 || !near(g.Telemetry.RolloutSuccess, 32.0/40) {
		t.Errorf("outcomes %v success %v", o, g.Telemetry.RolloutSuccess)
	}
	if c := g.Telemetry.ModelCalls["chat_completions"]; c.Count != 40 || !near(c.Mean, 200) {
		t.Errorf("model calls %+v", g.Telemetry.ModelCalls)
	}
	if vd := g.Telemetry.VerifyDuration; vd.Count != 40 || !near(vd.Mean, 50) {
		t.Errorf("verify duration %+v", vd)
	}
	if g.Telemetry.HTTPRetries["timeout"] != 4 {
		t.Errorf("retries %v", g.Telemetry.HTTPRetries)
	}
	if s := g.Telemetry.SandboxSpans["gym.sandbox.exec"]; s.Count != 1 || !near(s.Mean, 30) {
		t.Errorf("sandbox spans %+v", g.Telemetry.SandboxSpans)
	}
	if g.VerifySpans["ok"] != 1 || g.VerifySpans["error"] != 1 {
		t.Errorf("verify spans %v", g.VerifySpans)
	}
	// Without the gauge: success from the spans' status, not 0 %.
	r, err = Build(writeGymJob(t, "", traces))
	if err != nil {
		t.Fatal(err)
	}
	if !near(r.Gym.VerifySuccess, 0.5) || r.Gym.Telemetry.VerifySource != "gym.verify spans" {
		t.Errorf("from spans: %v (%q), want 0.5", r.Gym.VerifySuccess, r.Gym.Telemetry.VerifySource)
	}
	var out strings.Builder
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "verify success") || !strings.Contains(out.String(), "50.0%") {
		t.Errorf("text lacks the verify success:\n%s", out.String())
	}
}

// TestGymSectionOnce: Gym's attributed telemetry without rollout or verify
// spans under known names gives one "== gym" section, which says the names
// were not recognised on a line of its own, not a second "== gym" header.
func TestGymSectionOnce(t *testing.T) {
	r := &Report{Gym: Gym{Telemetry: GymTelemetry{HTTPRetries: map[string]float64{"timeout": 2}}},
		Absent: []Absence{{Section: "gym", Why: WhyNames, Detail: "no gym.rollout or gym.verify spans, no gym.* metrics among: span my.rollout"}}}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if n := strings.Count(out, "== gym"); n != 1 || !strings.Contains(out, "  rollouts and verify      names not recognised (no gym.rollout") {
		t.Errorf("%d \"== gym\" headers:\n%s", n, out)
	}
}
