package inspect

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// scrapeLine is one scrape's report samples of a target, as the Prometheus
// receiver writes them: up, scrape_samples_scraped and (with
// extra_scrape_metrics) scrape_body_size_bytes, one timestamp.
func scrapeLine(job, instance string, ns int64, up, samples, body float64) string {
	g := func(name string, v float64) string {
		return fmt.Sprintf(`{"name":%q,"gauge":{"dataPoints":[{"timeUnixNano":"%d","asDouble":%v}]}}`, name, ns, v)
	}
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}},`+
		`{"key":"service.instance.id","value":{"stringValue":%q}},{"key":"service.name.override","value":{"stringValue":%q}}]},`+
		`"scopeMetrics":[{"scope":{},"metrics":[%s,%s,%s]}]}]}`+"\n", instance, job,
		g("scrape_samples_scraped", samples), g("up", up), g("scrape_body_size_bytes", body))
}

// A target over its sample_limit, one stopped by body_size_limit, one
// whose page was refused while parsing (a label limit), and one healthy:
// the report and its text name each limit.
func TestLimitHits(t *testing.T) {
	job := t.TempDir()
	dir := filepath.Join(job, "otel")
	os.MkdirAll(dir, 0o755)
	cfg, err := os.ReadFile("../render/testdata/two-services.golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "collector.yaml"), cfg, 0o600)
	os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(
		scrapeLine("gym-vllm/policy", "gn1:8000", 1e9, 0, 2000000, 61000000)+
			scrapeLine("gym-vllm/policy", "gn1:8000", 2e9, 0, 1500000, 46000000)+
			scrapeLine("dcgm", "gn1:9400", 1e9, 0, 0, -1)+
			scrapeLine("node", "gn1:9100", 1e9, 0, 12, 900)+
			scrapeLine("node", "gn1:9100", 2e9, 1, 548, 60000)), 0o600)
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]TargetHealth{}
	for _, x := range r.Health.Dirs[0].Targets {
		got[x.Job] = x
	}
	if h := got["gym-vllm/policy"].LimitHits; h.SampleLimit != 50000 || h.SampleLimitHits != 2 || h.MaxSamples != 2000000 || h.BodyLimitHits != 0 || h.RefusedPages != 0 {
		t.Errorf("vllm: %+v", h)
	}
	if h := got["dcgm"].LimitHits; h.BodyLimitHits != 1 || h.SampleLimitHits != 0 || h.RefusedPages != 0 {
		t.Errorf("dcgm: %+v", h)
	}
	if h := got["node"].LimitHits; h.RefusedPages != 1 || h.SampleLimitHits != 0 || got["node"].Answered != 1 {
		t.Errorf("node: %+v", got["node"])
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"LIMIT: sample_limit 50000 exceeded in 2 scrape(s) (up to 2000000 samples)",
		"LIMIT: body_size_limit exceeded in 1 scrape(s)",
		"LIMIT: 1 page(s) refused while parsing (a label limit or a malformed page)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}
