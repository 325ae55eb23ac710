package inspect

import (
	"fmt"
	"strings"
	"testing"
)

// itlLine is one scrape of a vLLM server with an inter-token histogram of
// n observations under each of names, every one in (0.01, 0.05].
func itlLine(node string, sec, n int, names ...string) string {
	var ms []string
	for _, name := range names {
		ms = append(ms, fmt.Sprintf(`{"name":%q,"histogram":{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","count":"%d","sum":%v,"bucketCounts":["0","%d","0"],"explicitBounds":[0.01,0.05]}],"aggregationTemporality":2}}`,
			name, vl, ns(sec), n, float64(n)*0.03, n))
	}
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":%s,"scopeMetrics":[{"metrics":[%s]}]}]}`+"\n", res(node, "gym-vllm/policy", node+":8000"), strings.Join(ms, ","))
}

// TestInterTokenNames: the renamed inter-token histogram and the old name
// are both read; a server exposing both is counted once, under the new one.
func TestInterTokenNames(t *testing.T) {
	m := itlLine("gn1", 0, 5, "vllm:time_per_output_token_seconds") +
		itlLine("gn2", 0, 7, "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
	r, err := Build(writeGymJob(t, m, ""))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Value{}
	for _, s := range r.ModelServers {
		got[s.Node] = s.InterToken.Count
	}
	if got["gn1"] != 5 || got["gn2"] != 7 {
		t.Errorf("inter-token counts %v, want gn1 5 (old name), gn2 7 (new name only)", got)
	}
}
