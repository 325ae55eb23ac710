package supervise

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// readingText writes fams as lines a test can match: "# TYPE name
// gauge|counter", then name{k="v",...} value per point (strconv 'g').
func readingText(fams []family) string {
	var b strings.Builder
	for _, f := range fams {
		typ := "gauge"
		if f.counter {
			typ = "counter"
		}
		b.WriteString("# TYPE " + f.name + " " + typ + "\n")
		for _, p := range f.points {
			var ls []string
			for _, l := range p.labels {
				ls = append(ls, l[0]+"="+strconv.Quote(l[1]))
			}
			b.WriteString(f.name + "{" + strings.Join(ls, ",") + "} " + strconv.FormatFloat(p.value, 'g', -1, 64) + "\n")
		}
	}
	return b.String()
}

// otlpSink is a stand-in for the collector's otlp/plugin receiver: it
// takes OTLP/HTTP protobuf metrics behind a bearer token and keeps each
// request decoded.
type otlpSink struct {
	srv   *httptest.Server
	token string
	mu    sync.Mutex
	got   []*metricsv1.MetricsData
	auths []string
}

func newOTLPSink(t *testing.T, token string) *otlpSink {
	s := &otlpSink{token: token}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.auths = append(s.auths, r.Header.Get("Authorization"))
		if r.URL.Path != "/v1/metrics" || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("Authorization") != "Bearer "+s.token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var m metricsv1.MetricsData
		if err := proto.Unmarshal(b, &m); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s.got = append(s.got, &m)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *otlpSink) port() int { return s.srv.Listener.Addr().(*net.TCPAddr).Port }

// TestNodeMetricsPush: the node's reading reaches the receiver as OTLP
// protobuf behind the plugin's token, under the producer "cgroup" and
// the node; the collector group's memory a gauge, its CPU time a
// cumulative monotonic sum whose start is its first reading's time in
// every later push; the job without a Slurm group here one
// cgroup_not_kept point with its reason and no value of its own; a
// reason that is not UTF-8 made valid (OTLP's strings must be, or the
// whole request fails), and every attribute value at most maxReasonBytes.
// A refused push is counted, not kept; a series no longer read is
// forgotten.
func TestNodeMetricsPush(t *testing.T) {
	sink := newOTLPSink(t, "gos_tok")
	r := hostReader(t)
	r.job.JobID = "40\xff01" // not UTF-8: the reason that names it is not either
	n := newNodeMetrics(r, nil, nil, "gn9")
	for i := 0; i < 2; i++ {
		if err := n.push(context.Background(), sink.port(), "gos_tok"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := n.push(context.Background(), sink.port(), "wrong"); err == nil || n.failures != 1 || n.pushed != 2 {
		t.Errorf("a refused push: %v, %d failures, %d pushed; want an error, 1 and 2", err, n.failures, n.pushed)
	}
	if len(sink.got) != 2 {
		t.Fatalf("%d requests taken, want 2", len(sink.got))
	}
	var starts []uint64
	for i, req := range sink.got {
		rm := req.ResourceMetrics[0]
		res := map[string]string{}
		for _, a := range rm.Resource.Attributes {
			res[a.Key] = a.Value.GetStringValue()
		}
		if res["service.name"] != vocab.CgroupProducer || res["service.instance.id"] != "gn9" {
			t.Errorf("resource %v, want service.name %s on gn9", res, vocab.CgroupProducer)
		}
		var memOK, cpuOK, notKept bool
		for _, m := range rm.ScopeMetrics[0].Metrics {
			for _, dp := range append(m.GetGauge().GetDataPoints(), m.GetSum().GetDataPoints()...) {
				attrs := map[string]string{}
				for _, a := range dp.Attributes {
					attrs[a.Key] = a.Value.GetStringValue()
					if !utf8.ValidString(a.Value.GetStringValue()) {
						t.Errorf("%s: attribute %s not UTF-8", m.Name, a.Key)
					}
				}
				if attrs["cgroup"] == "job" && m.Name != vocab.CgroupNotKept {
					t.Errorf("%s: a value for a job that has no group here", m.Name)
				}
				switch m.Name {
				case vocab.CgroupMemoryCurrent:
					memOK = m.GetGauge() != nil && attrs["cgroup"] == "collector" && dp.GetAsDouble() > 0
				case vocab.CgroupCPUSeconds:
					s := m.GetSum()
					cpuOK = s != nil && s.IsMonotonic && s.AggregationTemporality == metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE &&
						dp.StartTimeUnixNano > 0 && dp.StartTimeUnixNano <= dp.TimeUnixNano
					if attrs["cgroup"] == "collector" {
						starts = append(starts, dp.StartTimeUnixNano)
					}
				case vocab.CgroupNotKept:
					notKept = notKept || attrs["cgroup"] == "job" && attrs["family"] == "all" && strings.Contains(attrs["reason"], "job 40\uFFFD01")
				}
			}
		}
		if !memOK || !cpuOK || !notKept {
			t.Errorf("request %d: collector memory gauge %v, CPU sum %v, the job not kept %v", i, memOK, cpuOK, notKept)
		}
	}
	if len(starts) != 2 || starts[0] != starts[1] {
		t.Errorf("the collector group's CPU starts %v: want one start, its first reading's", starts)
	}
	// A series gone from a reading (a step's group after its step) is
	// forgotten: the starts kept are the last reading's counters.
	gone := []family{{name: vocab.CgroupCPUSeconds, counter: true, points: []point{{labels: [][2]string{{"cgroup", "step"}, {"step", "7"}}, value: 1}}}}
	long := n.request(gone, time.Now())
	if v := long.ResourceMetrics[0].ScopeMetrics[0].Metrics[0].GetSum().DataPoints[0].Attributes[1].Value.GetStringValue(); v != "7" {
		t.Errorf("step %q, want 7", v)
	}
	gone[0].points[0].labels[1][1] = strings.Repeat("é", maxReasonBytes)
	long = n.request(gone, time.Now())
	if v := long.ResourceMetrics[0].ScopeMetrics[0].Metrics[0].GetSum().DataPoints[0].Attributes[1].Value.GetStringValue(); len(v) > maxReasonBytes || !utf8.ValidString(v) || len(v) < maxReasonBytes-1 {
		t.Errorf("a %d-byte step pushed as %d bytes (valid UTF-8 %v), want at most %d, cut at a rune", 2*maxReasonBytes, len(v), utf8.ValidString(v), maxReasonBytes)
	}
	n.request(nil, time.Now())
	if len(n.starts) != 0 {
		t.Errorf("%d counter starts kept after a reading without counters, want 0", len(n.starts))
	}
}
