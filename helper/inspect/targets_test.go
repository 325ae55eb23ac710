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
