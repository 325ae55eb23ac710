package slurmdocker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/portfilter"
)

// watchPortFilter checks, while the job jobID runs, each compute node's
// packet filter (port_filter=auto; compose.yml gives c1 and c2
// CAP_NET_ADMIN, compose.cgroup2.yml the host's unified hierarchy): once
// the node's first task has started (the file first[node] in the job dir
// host exists, so its prolog is done), the node's table (inet gym_otel)
// maps every loopback port of the job's collector and supervisor (the
// node's state.json in otelDir[node]) to the job's chain; another user of
// the node (nobody) gets no answer from the job's OTLP HTTP receiver, where
// the job's own user gets one (HTTP 401 without the token). The returned
// channel yields, once, what failed (errs) and what was seen on each node
// (seen). On a cluster that up.sh brought up without the filter
// (GOS_PORT_FILTER=off: the host has no unified hierarchy to give the
// nodes), it yields nothing at once, and the reason is in up.sh's output.
func (c *cluster) watchPortFilter(jobID, host string, first, otelDir map[string]string) <-chan filterSeen {
	out := make(chan filterSeen, 1)
	if c.portFilter != "on" {
		out <- filterSeen{}
		return out
	}
	go func() {
		var f filterSeen
		for _, n := range []string{"c1", "c2"} {
			errs, seen := c.checkPortFilter(n, jobID, filepath.Join(host, first[n]), otelDir[n])
			f.errs = append(f.errs, errs...)
			if seen != "" {
				f.seen = append(f.seen, seen)
			}
		}
		out <- f
	}()
	return out
}

// filterSeen is what watchPortFilter found: errs, what failed; seen, one
// line per node checked.
type filterSeen struct{ errs, seen []string }

// checkPortFilter is watchPortFilter's check of one node: what failed,
// and a line saying what was seen.
func (c *cluster) checkPortFilter(node, jobID, first, otelDir string) (errs []string, seen string) {
	deadline := time.Now().Add(120 * time.Second)
	for {
		if _, err := os.Stat(first); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return []string{fmt.Sprintf("%s: no task started (%s) in 120 s: the packet filter not checked", node, first)}, ""
		}
		time.Sleep(100 * time.Millisecond)
	}
	var st jobdir.State
	b, err := os.ReadFile(filepath.Join(otelDir, jobdir.StateFile))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	ports := st.Ports.Loopback()
	if err != nil || len(ports) < 4 || st.Ports.OTLPHTTP == 0 {
		return []string{fmt.Sprintf("%s: the job's ports from %s/state.json: %v %+v", node, otelDir, err, st.Ports)}, ""
	}
	list, err := c.on(node, "nft", "list", "map", "inet", portfilter.Table, "in_ports")
	if err != nil {
		return []string{fmt.Sprintf("%s: nft list map inet %s in_ports: %v: %s", node, portfilter.Table, err, list)}, ""
	}
	for _, p := range ports {
		// job_<id>_<cluster>_<node>_<hash>_in (portfilter.Job.Chain).
		if !regexp.MustCompile(fmt.Sprintf(`\b%d : jump job_%s_\w+_%s_[0-9a-f]{8}_in\b`, p, jobID, regexp.QuoteMeta(node))).MatchString(list) {
			errs = append(errs, fmt.Sprintf("%s: the node's filter lacks port %d of job %s:\n%s", node, p, jobID, list))
		}
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/traces", st.Ports.OTLPHTTP)
	curl := []string{"curl", "-s", "-m", "3", "-o", "/dev/null", "-w", "%{http_code}", "-XPOST", "-H", "Content-Type: application/json", "--data", `{"resourceSpans":[]}`, url}
	other, _ := c.on(node, append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, curl...)...)
	own, _ := c.on(node, append([]string{"setpriv", fmt.Sprintf("--reuid=%d", jobUID), fmt.Sprintf("--regid=%d", jobUID), "--clear-groups"}, curl...)...)
	if strings.TrimSpace(other) != "000" {
		errs = append(errs, fmt.Sprintf("%s: another user (nobody) reached the job's OTLP HTTP receiver: HTTP %q, want no connection (000)", node, other))
	}
	if strings.TrimSpace(own) != "401" {
		errs = append(errs, fmt.Sprintf("%s: the job's user without the token: HTTP %q, want 401 (the receiver answers it)", node, own))
	}
	return errs, fmt.Sprintf("%s: ports %v of job %s in the node's table; nobody's POST to the OTLP HTTP receiver: %q, the job's user's without the token: %q",
		node, ports, jobID, strings.TrimSpace(other), strings.TrimSpace(own))
}
