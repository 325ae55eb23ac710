package inspect

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func upLine(job, instance string, ns int64, v float64) string {
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}},`+
		`{"key":"service.instance.id","value":{"stringValue":%q}},{"key":"service.name.override","value":{"stringValue":%q}}]},`+
		`"scopeMetrics":[{"scope":{},"metrics":[{"name":"up","gauge":{"dataPoints":[{"timeUnixNano":"%d","asDouble":%v}]}}]}]}]}`+"\n", instance, job, ns, v)
}

// TestTargets: the targets of a rendered collector.yaml (the golden of
// helper/render), their scrapes counted, and the unanswered ones named.
func TestTargets(t *testing.T) {
	dir := t.TempDir()
	cfg, err := os.ReadFile("../render/testdata/two-services.golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "collector.yaml"), cfg, 0o600)
	os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(
		upLine("gym-vllm/policy", "gn1:8000", 1e9, 0)+
			upLine("gym-vllm/policy", "gn1:8000", 2e9, 1)+
			upLine("node", "gn1:9100", 3e9, 1)+
			upLine("dcgm", "gn1:9400", 4e9, 0)+
			upLine("dcgm", "elsewhere:9400", 5e9, 1)), 0o600)
	ts, err := Targets(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Target{}
	for _, x := range ts {
		got[x.Job] = x
	}
	if len(ts) != 3 || got["gym-vllm/policy"].Scrapes != 2 || got["gym-vllm/policy"].Answered != 1 ||
		got["node"].Answered != 1 || got["dcgm"].Scrapes != 1 || got["dcgm"].Answered != 0 {
		t.Fatalf("targets: %+v", ts)
	}
	if p := got["gym-vllm/policy"]; p.First.UnixNano() != 1e9 || p.Last.UnixNano() != 2e9 {
		t.Errorf("first/last: %v %v", p.First, p.Last)
	}
	err = Unanswered(dir, ts)
	if err == nil || !strings.Contains(err.Error(), "scrape target dcgm (gn1:9400) has no sample") || strings.Contains(err.Error(), "node") {
		t.Errorf("unanswered: %v", err)
	}
	var b strings.Builder
	WriteTargets(&b, ts)
	if !strings.Contains(b.String(), "gym-vllm/policy (gn1:8000): 2 scrapes, 1 answered") {
		t.Errorf("WriteTargets:\n%s", b.String())
	}
	if _, err := Targets(t.TempDir()); !os.IsNotExist(err) {
		t.Errorf("no collector.yaml: %v", err)
	}
}

// TestTargetsWarmingUpAndEnded: failed scrapes before a target's first
// answer (a model still loading) and after its last (the service ended
// before the collector) are not trouble; one between two answers is, and
// so is every scrape of a target that never answered. The points come out
// of order, as several batches of one file can.
func TestTargetsWarmingUpAndEnded(t *testing.T) {
	dir := t.TempDir()
	cfg, err := os.ReadFile("../render/testdata/two-services.golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "collector.yaml"), cfg, 0o600)
	var lines string
	for _, p := range []struct {
		job, inst string
		s         int64
		v         float64
	}{
		{"gym-vllm/policy", "gn1:8000", 3, 1},
		{"gym-vllm/policy", "gn1:8000", 1, 0}, // warming up
		{"gym-vllm/policy", "gn1:8000", 2, 0}, // warming up
		{"gym-vllm/policy", "gn1:8000", 4, 1},
		{"gym-vllm/policy", "gn1:8000", 5, 0}, // ended
		{"node", "gn1:9100", 1, 1},
		{"node", "gn1:9100", 2, 0}, // a failure mid-run
		{"node", "gn1:9100", 3, 1},
		{"dcgm", "gn1:9400", 1, 0}, // never answered
		{"dcgm", "gn1:9400", 2, 0},
	} {
		lines += upLine(p.job, p.inst, p.s*1e9, p.v)
	}
	os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(lines), 0o600)
	ts, err := Targets(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Target{}
	for _, x := range ts {
		got[x.Job] = x
	}
	for job, want := range map[string][5]int{
		// scrapes, answered, warming up, ended, failed
		"gym-vllm/policy": {5, 2, 2, 1, 0},
		"node":            {3, 2, 0, 0, 1},
		"dcgm":            {2, 0, 0, 0, 2},
	} {
		x := got[job]
		if g := [5]int{x.Scrapes, x.Answered, x.WarmingUp, x.Ended, x.Failed()}; g != want {
			t.Errorf("%s: scrapes, answered, warming up, ended, failed = %v, want %v", job, g, want)
		}
	}
	var b strings.Builder
	WriteTargets(&b, ts)
	for _, want := range []string{
		"gym-vllm/policy (gn1:8000): 5 scrapes, 2 answered (2 before its first answer: warming up) (1 after its last: it had ended), first",
		"node (gn1:9100): 3 scrapes, 2 answered  FAILED 1, first",
		"dcgm (gn1:9400): 2 scrapes, 0 answered  FAILED 2, first",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTargets: no %q in\n%s", want, b.String())
		}
	}
	// The report counts them the same way: only node and dcgm are failed.
	r, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, ft := range r.Health.FailedTargets {
		failed = append(failed, ft.Job)
	}
	if strings.Join(failed, ",") != "node,dcgm" && strings.Join(failed, ",") != "dcgm,node" {
		t.Errorf("failed targets %v, want node and dcgm", failed)
	}
}
