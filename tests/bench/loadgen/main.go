// Command loadgen sends OTLP/HTTP protobuf trace requests at a fixed span
// rate to the job's collector, for the P4/P5 benchmarks (tests/bench).
//
// It reads the collector's address and receiver token the way an OpenTelemetry
// SDK does, from OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_HEADERS
// (set by the plugin in every task of a --gym-otel job), and refuses any
// endpoint that is not http://127.0.0.1:PORT. It is bounded: at most 200,000
// spans/s, 120 s per step, 20 steps and 20 million spans in all.
//
//	loadgen --steps 5000:10s,10000:10s --pause 5s --tag run1 --out result.json
//
// Every span carries the attribute bench.tag=<tag>-s<step index> so that the
// spans of each step can be counted in traces.jsonl and at the backend.
// Requests are not retried: a refused or failed request counts its spans as
// failed. The summary (JSON, one object per step) goes to --out and stdout.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	maxRate     = 200000
	maxStep     = time.Hour
	maxSteps    = 20
	maxSpansAll = 20_000_000
)

type step struct {
	Rate     int           `json:"rate"`
	Duration time.Duration `json:"-"`
}

// Result is one step's summary.
type Result struct {
	Tag         string  `json:"tag"`
	Rate        int     `json:"target_rate"`
	Seconds     float64 `json:"seconds"`
	SentSpans   int64   `json:"sent_spans"`
	OKSpans     int64   `json:"ok_spans"`
	FailedSpans int64   `json:"failed_spans"`
	Requests    int64   `json:"requests"`
	FailedReqs  int64   `json:"failed_requests"`
	Achieved    float64 `json:"achieved_rate"`
	LateBatches int64   `json:"late_batches"`
	FirstError  string  `json:"first_error,omitempty"`
}

func main() {
	steps := flag.String("steps", "1000:5s", "comma list of RATE:DURATION steps (spans/s : Go duration)")
	pause := flag.Duration("pause", 5*time.Second, "pause between steps")
	batch := flag.Int("batch", 200, "spans per request")
	workers := flag.Int("workers", 4, "concurrent requests")
	tag := flag.String("tag", "bench", "bench.tag prefix")
	out := flag.String("out", "", "write the JSON summary here too")
	flag.Parse()

	plan, err := parseSteps(*steps)
	if err != nil {
		fatal(err)
	}
	if *batch < 1 || *batch > 5000 || *workers < 1 || *workers > 32 {
		fatal(fmt.Errorf("--batch 1..5000, --workers 1..32"))
	}
	endpoint, headers, err := target()
	if err != nil {
		fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: *workers, Proxy: nil,
	}}
	var results []Result
	for i, s := range plan {
		if i > 0 {
			time.Sleep(*pause)
		}
		r := runStep(client, endpoint, headers, fmt.Sprintf("%s-s%d", *tag, i), s, *batch, *workers)
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "loadgen: %s rate %d: %d ok, %d failed spans in %.1f s (%.0f/s achieved)\n",
			r.Tag, r.Rate, r.OKSpans, r.FailedSpans, r.Seconds, r.Achieved)
	}
	data, _ := json.MarshalIndent(results, "", "  ")
	fmt.Println(string(data))
	if *out != "" {
		if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
			fatal(err)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "loadgen:", err)
	os.Exit(2)
}

func parseSteps(s string) ([]step, error) {
	var plan []step
	total := 0
	for _, f := range strings.Split(s, ",") {
		r, d, ok := strings.Cut(strings.TrimSpace(f), ":")
		if !ok {
			return nil, fmt.Errorf("step %q: want RATE:DURATION", f)
		}
		rate, err := strconv.Atoi(r)
		if err != nil || rate < 1 || rate > maxRate {
			return nil, fmt.Errorf("step %q: rate 1..%d", f, maxRate)
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 || dur > maxStep {
			return nil, fmt.Errorf("step %q: duration up to %v", f, maxStep)
		}
		total += int(float64(rate) * dur.Seconds())
		plan = append(plan, step{rate, dur})
	}
	if len(plan) > maxSteps || total > maxSpansAll {
		return nil, fmt.Errorf("at most %d steps and %d spans", maxSteps, maxSpansAll)
	}
	return plan, nil
}

// target returns <endpoint>/v1/traces and the headers from the OTel env;
// only http://127.0.0.1:PORT is accepted.
func target() (string, http.Header, error) {
	ep := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if ep == "" {
		ep = strings.TrimRight(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "/")
		if ep != "" {
			ep += "/v1/traces"
		}
	}
	u, err := url.Parse(ep)
	if ep == "" || err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" {
		return "", nil, fmt.Errorf("endpoint %q: only http://127.0.0.1:PORT is allowed (set by --gym-otel)", ep)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/x-protobuf")
	for _, kv := range strings.Split(os.Getenv("OTEL_EXPORTER_OTLP_HEADERS"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		k, _ = url.PathUnescape(strings.TrimSpace(k))
		v, _ = url.PathUnescape(strings.TrimSpace(v))
		h.Set(k, v)
	}
	return ep, h, nil
}

func runStep(client *http.Client, endpoint string, headers http.Header, tag string, s step, batch, workers int) Result {
	total := int(float64(s.Rate) * s.Duration.Seconds())
	nBatches := (total + batch - 1) / batch
	every := time.Duration(float64(time.Second) * float64(batch) / float64(s.Rate))
	res := Result{Tag: tag, Rate: s.Rate}
	var ok, failed, reqs, freqs, late atomic.Int64
	var firstErr atomic.Value
	work := make(chan int, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				body := encode(tag, n)
				req, _ := http.NewRequest(http.MethodPost, endpoint, bytes.NewReader(body))
				req.Header = headers.Clone()
				resp, err := client.Do(req)
				reqs.Add(1)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						err = fmt.Errorf("HTTP %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(int64(n))
					freqs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(int64(n))
			}
		}()
	}
	start := time.Now()
	left := total
	for i := 0; i < nBatches; i++ {
		at := start.Add(time.Duration(i) * every)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		} else if d < -every {
			late.Add(1)
		}
		n := min(batch, left)
		left -= n
		work <- n
	}
	close(work)
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.OKSpans, res.FailedSpans = ok.Load(), failed.Load()
	res.SentSpans = res.OKSpans + res.FailedSpans
	res.Requests, res.FailedReqs, res.LateBatches = reqs.Load(), freqs.Load(), late.Load()
	res.Achieved = float64(res.OKSpans) / res.Seconds
	if e, _ := firstErr.Load().(string); e != "" {
		res.FirstError = e
	}
	return res
}

// encode returns an ExportTraceServiceRequest (protobuf) with n spans of
// one resource and scope, each with bench.tag=tag.
func encode(tag string, n int) []byte {
	now := uint64(time.Now().UnixNano())
	tagKV := kvString("bench.tag", tag)
	var spans []byte
	ids := make([]byte, 24*n)
	_, _ = rand.Read(ids)
	for i := 0; i < n; i++ {
		var sp []byte
		sp = appendBytes(sp, 1, ids[24*i:24*i+16]) // trace_id
		sp = appendBytes(sp, 2, ids[24*i+16:24*i+24])
		sp = appendBytes(sp, 5, []byte("bench.span"))
		sp = appendVarintField(sp, 6, 1) // SPAN_KIND_INTERNAL
		sp = appendFixed64(sp, 7, now-1_000_000)
		sp = appendFixed64(sp, 8, now)
		sp = appendBytes(sp, 9, tagKV)
		sp = appendBytes(sp, 9, kvString("nemo.gym.run_id", "bench"))
		spans = appendBytes(spans, 2, sp) // ScopeSpans.spans
	}
	scope := appendBytes(nil, 1, []byte("gym-otel-bench")) // InstrumentationScope.name
	scopeSpans := append(appendBytes(nil, 1, scope), spans...)
	resource := appendBytes(nil, 1, kvString("service.name", "bench-loadgen"))
	rs := appendBytes(nil, 1, resource)
	rs = appendBytes(rs, 2, scopeSpans)
	return appendBytes(nil, 1, rs)
}

func kvString(k, v string) []byte {
	val := appendBytes(nil, 1, []byte(v)) // AnyValue.string_value
	kv := appendBytes(nil, 1, []byte(k))
	return appendBytes(kv, 2, val)
}

func appendVarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendBytes(b []byte, field int, v []byte) []byte {
	b = appendVarint(b, uint64(field)<<3|2)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendVarintField(b []byte, field int, v uint64) []byte {
	return appendVarint(appendVarint(b, uint64(field)<<3), v)
}

func appendFixed64(b []byte, field int, v uint64) []byte {
	b = appendVarint(b, uint64(field)<<3|1)
	return binary.LittleEndian.AppendUint64(b, v)
}
