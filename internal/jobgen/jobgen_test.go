package jobgen

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// recorded is the recorded two-node job the tests of inspect use.
var recorded = filepath.Join(testenv.Root(), "helper", "inspect", "testdata", "slurmrun", "gym-two-nodes", "otel")

// lastGenTokens is the last vllm_generation_tokens_total of a metrics file.
func lastGenTokens(t *testing.T, path string) float64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`"name":"vllm_generation_tokens_total".*?"asDouble":([0-9.e+]+)`)
	m := re.FindAllStringSubmatch(string(data), -1)
	if len(m) == 0 {
		t.Fatalf("%s: no vllm_generation_tokens_total", path)
	}
	v, err := strconv.ParseFloat(m[len(m)-1][1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMake: 8 nodes from the recorded job: gn1 as recorded, gn2 .. gn8
// named for themselves, their vLLM counters times their factor (whole),
// the slow node's a quarter of that, the late node's prolog 5 s later;
// fewer than 2 nodes is an error.
func TestMake(t *testing.T) {
	if err := Make(recorded, t.TempDir(), Options{Nodes: 1}); err == nil || !strings.Contains(err.Error(), "1 nodes") {
		t.Errorf("1 node: %v", err)
	}
	o := Default(8)
	if o.Slow != "gn4" || o.LateProlog != "gn6" {
		t.Fatalf("Default(8): %+v", o)
	}
	dst := filepath.Join(t.TempDir(), "otel")
	if err := Make(recorded, dst, o); err != nil {
		t.Fatal(err)
	}
	base := lastGenTokens(t, filepath.Join(dst, "nodes", "gn2", "metrics.jsonl")) / Factor(2, o.Spread)
	for i := 2; i <= 8; i++ {
		dir := filepath.Join(dst, "nodes", "gn"+strconv.Itoa(i))
		rc, err := os.ReadFile(filepath.Join(dir, "receipt.json"))
		if err != nil || !strings.Contains(string(rc), `"node": "gn`+strconv.Itoa(i)+`"`) {
			t.Errorf("gn%d receipt: %v %s", i, err, rc)
		}
		want := base * Factor(i, o.Spread)
		if i == 4 {
			want *= o.SlowFactor
		}
		if got := lastGenTokens(t, filepath.Join(dir, "metrics.jsonl")); got < want-1 || got > want+1 || got != float64(int64(got)) {
			t.Errorf("gn%d: generation tokens %v, want %.0f (whole)", i, got, want)
		}
	}
	tr, err := os.ReadFile(filepath.Join(dst, "nodes", "gn6", "traces.jsonl"))
	if err != nil || !strings.Contains(string(tr), `"endTimeUnixNano":"1796183857496254847"`) {
		t.Errorf("gn6's prolog not 5 s late: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "metrics.jsonl")); err != nil {
		t.Errorf("gn1's files: %v", err)
	}
}
