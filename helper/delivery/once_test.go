package delivery_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// TestOnceRealBackend: one line of each signal sent once to the real
// collector with bearer auth and gzip: every item accepted, the resource
// attribute added on the way, the line unchanged; the wrong token gets
// 401 and a cause naming it; a closed port is an error, not an answer.
func TestOnceRealBackend(t *testing.T) {
	t.Parallel()
	token := "once-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	bearer := "Bearer " + token
	opt := delivery.Options{Endpoint: be.URL, Headers: map[string]string{"Authorization": bearer}, Compression: "gzip",
		Timeout: 5 * time.Second, ResourceAttributes: map[string]string{"Authorization": bearer}}
	line := traceLine(0, 3)
	for _, c := range []struct {
		sig, line string
		items     int64
	}{{"traces", line, 3}, {"metrics", metricLine(1, 4), 4}, {"logs", logLine(2, 2), 2}} {
		a, err := delivery.Once(t.Context(), opt, c.sig, []byte(c.line))
		if err != nil || !a.OK() || a.Items != c.items || a.Accepted != c.items || a.Status != 200 || a.Cause() != "" {
			t.Errorf("%s: answer %+v, %v: want all %d items accepted with 200", c.sig, a, err, c.items)
		}
	}
	if line != traceLine(0, 3) {
		t.Error("Once changed the caller's line")
	}
	bad := opt
	bad.Headers = map[string]string{"Authorization": "Bearer wrong"}
	a, err := delivery.Once(t.Context(), bad, "traces", []byte(line))
	if err != nil || a.OK() || a.Status != 401 || a.Rejected != 3 || !strings.Contains(a.Cause(), "HTTP 401 Unauthorized") {
		t.Errorf("wrong token: answer %+v (cause %q), %v: want 401, every item rejected", a, a.Cause(), err)
	}
	be.Stop(t)
	tr, m, lg := otlptest.MustRead(t, be.Dir, "traces"), otlptest.MustRead(t, be.Dir, "metrics"), otlptest.MustRead(t, be.Dir, "logs")
	if len(tr.Spans) != 3 || m.Points() != 4 || len(lg.Logs) != 2 {
		t.Fatalf("the backend holds %d spans, %d points, %d log records; want 3, 4, 2", len(tr.Spans), m.Points(), len(lg.Logs))
	}
	for _, s := range tr.Spans {
		if v, _ := s.Resource.Str("Authorization"); v != bearer {
			t.Errorf("span %s: resource Authorization %q, want the bearer token", s.Name, v)
		}
		if v, _ := s.Resource.Str("service.name"); v != "delivery-test" {
			t.Errorf("span %s: service.name %q lost", s.Name, v)
		}
	}
	if _, err := delivery.Once(t.Context(), opt, "traces", []byte(line)); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a stopped backend: %v, want connection refused", err)
	}
}

// TestOnceAnswers: a partial success, a refusal and a hung backend (the
// request's timeout, then ctx); bad input named; no retry on 503.
func TestOnceAnswers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls int
	var answer func(w http.ResponseWriter)
	set := func(f func(w http.ResponseWriter)) {
		mu.Lock()
		defer mu.Unlock()
		answer, calls = f, 0
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		calls++
		f := answer
		mu.Unlock()
		f(w)
	}))
	defer srv.Close()
	opt := delivery.Options{Endpoint: srv.URL, Timeout: 300 * time.Millisecond}
	line := []byte(traceLine(0, 5))
	set(func(w http.ResponseWriter) {
		io.WriteString(w, `{"partialSuccess":{"rejectedSpans":"2","errorMessage":"2 spans\ntoo old"}}`)
	})
	a, err := delivery.Once(t.Context(), opt, "traces", line)
	if err != nil || a.OK() || a.Accepted != 3 || a.Rejected != 2 || a.Cause() != "the backend rejected 2 of 5 items (partial success: 2 spans too old)" {
		t.Errorf("partial success: %+v (cause %q), %v", a, a.Cause(), err)
	}
	set(func(w http.ResponseWriter) { http.Error(w, "busy", http.StatusServiceUnavailable) })
	a, err = delivery.Once(t.Context(), opt, "traces", line)
	mu.Lock()
	n := calls
	mu.Unlock()
	if err != nil || a.Status != 503 || a.Rejected != 5 || n != 1 || a.Cause() != "the backend answered HTTP 503 Service Unavailable: busy" {
		t.Errorf("503: %+v (cause %q), %v, %d requests: want one request, no retry", a, a.Cause(), err, n)
	}
	set(func(w http.ResponseWriter) { time.Sleep(2 * time.Second) })
	start := time.Now()
	_, err = delivery.Once(t.Context(), opt, "traces", line)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || time.Since(start) > 1500*time.Millisecond {
		t.Errorf("hung backend: %v after %v: want the request's timeout (300 ms)", err, time.Since(start))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	opt.Timeout = 10 * time.Second
	if _, err := delivery.Once(ctx, opt, "traces", line); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ctx ended: %v", err)
	}
	for _, c := range []struct {
		opt       delivery.Options
		sig, line string
		want      string
	}{
		{delivery.Options{Endpoint: "otlp.example.com"}, "traces", string(line), `endpoint "otlp.example.com"`},
		{delivery.Options{Endpoint: srv.URL, Compression: "zstd"}, "traces", string(line), `compression "zstd"`},
		{delivery.Options{Endpoint: srv.URL}, "profiles", string(line), `signal "profiles"`},
		{delivery.Options{Endpoint: srv.URL}, "traces", `{"resourceSpans":[`, "not an OTLP-JSON export request"},
	} {
		if _, err := delivery.Once(t.Context(), c.opt, c.sig, []byte(c.line)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v %s: %v, want an error naming %s", c.opt, c.sig, err, c.want)
		}
	}
}
