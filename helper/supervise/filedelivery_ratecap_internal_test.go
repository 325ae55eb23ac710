package supervise

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/sirupsen/logrus"
)

// TestFileDeliveryRateCapSixteenNodes: 16 simulated nodes, each a
// supervisor's file delivery (startFileDelivery, otel.delivery_rate_cap
// 1,000 items/s) over its own node dir holding a backlog of 10 s of its
// cap in its three files, as after an outage; all start at once against
// one backend, which counts the items of every request as it arrives.
// After the first second the backend's rate stays within N x cap: the
// items arriving after it, less the one second's items per node that each
// node's bucket may hold then (its burst), over the time from the first
// second to the last arrival, within 5 % above 16,000 items/s; every 2 s
// window after the first second holds at most N x cap x (2 + 1) items (2 s
// at the cap and each node's burst: a request holds up to a second's
// items, its tokens taken before it is sent); the catch-up is not slower
// than half of N x cap. The backend ends holding every item, each once.
func TestFileDeliveryRateCapSixteenNodes(t *testing.T) {
	const (
		nodes     = 16
		rateCap   = 1000
		perLine   = 50
		linesEach = 68 // per file: 3 x 68 x 50 = 10,200 items per node
	)
	type arrival struct {
		at    time.Time
		items int64
	}
	var mu sync.Mutex
	var got []arrival
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		sig := strings.TrimPrefix(r.URL.Path, "/v1/")
		n, _, ok := jobdir.CountItems(sig, b)
		if err != nil || !ok || r.Header.Get("Authorization") != "Bearer node-token" {
			http.Error(w, "bad request", 400)
			return
		}
		mu.Lock()
		got = append(got, arrival{time.Now(), n})
		mu.Unlock()
		io.WriteString(w, "{}")
	}))
	defer srv.Close()

	var sups []*supervisor
	var want int64
	for i := range nodes {
		dir := t.TempDir()
		for _, sig := range []string{"traces", "metrics", "logs"} {
			var buf bytes.Buffer
			for l := range linesEach {
				buf.WriteString(rateCapLine(sig, i, l, perLine))
				want += perLine
			}
			if err := os.WriteFile(filepath.Join(dir, jobdir.SignalFile(sig)), buf.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		log := logrus.New()
		log.SetOutput(io.Discard)
		o := config.Defaults()
		o.Endpoint, o.DeliveryRateCap = srv.URL, rateCap
		sups = append(sups, &supervisor{out: dir, log: log, o: o, opt: Options{Token: "node-token"}})
	}
	start := time.Now()
	for _, s := range sups {
		if s.files = s.startFileDelivery(); s.files == nil {
			t.Fatal("no file delivery started with the default otel.delivery")
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := int64(0)
		for _, s := range sups {
			bl, err := delivery.Backlogs(s.out)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range bl {
				left += b.Items
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d items still past the checkpoints after 60 s", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	for _, s := range sups {
		s.finishFileDelivery(5 * time.Second)
		if d := s.files.receipt(); !d.Complete() || d.Accepted != want/nodes || d.DuplicatesBound != 0 {
			t.Errorf("%s: receipt's delivery %+v: want %d items acknowledged, none twice", s.out, d, want/nodes)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(got, func(i, j int) bool { return got[i].at.Before(got[j].at) })
	var total, after int64
	var last time.Time
	for _, a := range got {
		total += a.items
		if a.at.Sub(start) >= time.Second {
			after += a.items
		}
		last = a.at
	}
	if total != want {
		t.Fatalf("the backend counted %d items, the files hold %d", total, want)
	}
	limit := float64(nodes * rateCap)
	span := last.Sub(start.Add(time.Second)).Seconds()
	mean := (float64(after) - limit) / span
	// The largest 2 s window after the first second.
	const window = 2 * time.Second
	var peak, win int64
	j := -1
	for i, a := range got {
		if a.at.Sub(start) < time.Second {
			continue
		}
		if j < 0 {
			j = i
		}
		win += a.items
		for a.at.Sub(got[j].at) >= window {
			win -= got[j].items
			j++
		}
		peak = max(peak, win)
	}
	t.Logf("%d nodes x cap %d items/s: %d items in %v (%d requests); after the first second: %d items, %.0f items/s beyond the nodes' bursts over %.1f s, largest 2 s window %d items (bound %.0f); N x cap = %.0f",
		nodes, rateCap, total, took.Round(time.Millisecond), len(got), after, mean, span, peak, 3*limit, limit)
	if mean > 1.05*limit {
		t.Errorf("the rate after the first second %.0f items/s, above N x cap %.0f by more than 5 %%", mean, limit)
	}
	if float64(peak) > 3*limit {
		t.Errorf("a 2 s window after the first second held %d items, above N x cap x 3 (%.0f)", peak, 3*limit)
	}
	if mean < 0.5*limit {
		t.Errorf("mean rate after the first second %.0f items/s, below half of N x cap %.0f: the nodes did not send in parallel", mean, limit)
	}
}

// rateCapLine is one OTLP-JSON line of signal with n items, line l of
// node i.
func rateCapLine(sig string, i, l, n int) string {
	var items []string
	for k := range n {
		switch sig {
		case "traces":
			items = append(items, fmt.Sprintf(`{"traceId":"%032x","spanId":"%08x%08x","name":"w","startTimeUnixNano":"1","endTimeUnixNano":"2"}`, i+1, l+1, k+1))
		case "metrics":
			items = append(items, fmt.Sprintf(`{"timeUnixNano":"%d","asDouble":1}`, 1700000000000000000+k))
		default:
			items = append(items, `{"timeUnixNano":"1","body":{"stringValue":"x"}}`)
		}
	}
	res := fmt.Sprintf(`{"attributes":[{"key":"host.name","value":{"stringValue":"gn%d"}}]}`, i)
	switch sig {
	case "traces":
		return `{"resourceSpans":[{"resource":` + res + `,"scopeSpans":[{"spans":[` + strings.Join(items, ",") + `]}]}]}` + "\n"
	case "metrics":
		return `{"resourceMetrics":[{"resource":` + res + `,"scopeMetrics":[{"metrics":[{"name":"g","gauge":{"dataPoints":[` + strings.Join(items, ",") + `]}}]}]}]}` + "\n"
	}
	return `{"resourceLogs":[{"resource":` + res + `,"scopeLogs":[{"logRecords":[` + strings.Join(items, ",") + `]}]}]}` + "\n"
}
