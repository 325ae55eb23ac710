package main

// P9: the bytes node_exporter's series take in a node's metrics.jsonl,
// with the default local_node_metrics and with every series (null). The
// run is helper/render's TestNodeLocalAllowlist: the real collector
// scraping one page of the machine's real node_exporter every second,
// once per setting; bytes per scrape times 240 are a node-hour at the
// default 15 s interval. No Slurm.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
)

// p9Line is TestNodeLocalAllowlist's measurement line.
var p9Line = regexp.MustCompile(`metrics\.jsonl per scrape: (\d+) bytes keeping all, (\d+) by default \(([\d.]+)%\); per node-hour at 15 s: ([\d.]+) MB keeping all, ([\d.]+) MB by default`)

// runP9 runs TestNodeLocalAllowlist and returns its row.
func runP9() ([]Row, error) {
	logf("P9: node_exporter bytes in metrics.jsonl, default local_node_metrics against every series")
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestNodeLocalAllowlist$", "-v", "./helper/render")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GYM_OTEL_REQUIRE_REAL=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	m := p9Line.FindStringSubmatch(out.String())
	if err != nil || m == nil {
		return nil, fmt.Errorf("P9: go test -run TestNodeLocalAllowlist ./helper/render: %v\n%s", err, lastLines(out.String(), 40))
	}
	share, _ := strconv.ParseFloat(m[3], 64)
	met := "yes"
	if share > 10 {
		met = "NO"
	}
	return []Row{{
		ID:     "P9",
		What:   "node_exporter in metrics.jsonl per node-hour at 15 s, default local_node_metrics vs every series",
		Figure: fmt.Sprintf("%s MB vs %s MB (%s %% of the bytes)", m[5], m[4], m[3]),
		Spread: fmt.Sprintf("%s vs %s bytes per scrape", m[2], m[1]),
		Target: "<= 10 %", Met: met,
	}}, nil
}
