// Command gym-standin behaves like a NeMo Gym server with nemo-lens telemetry
// switched on: it runs a number of fake rollouts and reports them through the
// OpenTelemetry Go SDK, configured only from the environment it inherits.
//
// Environment (read by the SDK exporters themselves; no endpoint is set in code):
//
//	OTEL_EXPORTER_OTLP_ENDPOINT        base URL for traces and metrics (/v1/traces, /v1/metrics appended)
//	OTEL_EXPORTER_OTLP_PROTOCOL        http/protobuf (default) or grpc, for traces and metrics
//	                                   (OTEL_EXPORTER_OTLP_{TRACES,METRICS}_PROTOCOL win)
//	OTEL_EXPORTER_OTLP_HEADERS         e.g. Authorization=Bearer%20<token> (values URL-decoded)
//	OTEL_EXPORTER_OTLP_LOGS_ENDPOINT   gRPC endpoint for logs: like Gym, the log exporter speaks
//	                                   gRPC whatever the protocol setting (falls back to
//	                                   OTEL_EXPORTER_OTLP_ENDPOINT when unset)
//	OTEL_METRIC_EXPORT_INTERVAL        periodic reader interval in ms (default here: 1000)
//	NEMO_GYM_OTEL_ENABLED              "1" to emit anything at all
//	NEMO_GYM_OTEL_RUN_ID               span attribute nemo.gym.run_id
//	NEMO_GYM_OTEL_SPAN_GROUPS          comma list: default (gym.rollout), verify (gym.verify),
//	                                   sandbox (sandbox.exec); unset or "all": every group
//	NEMO_GYM_OTEL_LOGS_ENABLED         "1" or "true": one log record per rollout
//	TRACEPARENT, TRACESTATE            the context the process runs in (OpenTelemetry's
//	                                   environment variables as context carriers, W3C
//	                                   trace-context): when valid, the process's root span
//	                                   (gym.run, from the start to the last rollout) is its
//	                                   child, and every rollout, a trace of its own as Gym
//	                                   makes it, links to that root span
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

const scopeName = "nemo_gym.lens"

func main() {
	os.Exit(run())
}

// processSpan starts the process's root span, gym.run, as a child of the
// context in TRACEPARENT (and TRACESTATE), read with the SDK's W3C
// propagator from a carrier holding the environment's values; nil when
// TRACEPARENT holds no valid context (then the rollouts are the only
// roots, as without a launcher that hands one on). links is the link each
// rollout, a trace of its own, carries to that span.
func processSpan(ctx context.Context, tracer trace.Tracer, serviceName string) (trace.Span, []trace.Link) {
	carrier := propagation.MapCarrier{"traceparent": os.Getenv("TRACEPARENT")}
	if v := os.Getenv("TRACESTATE"); v != "" {
		carrier["tracestate"] = v
	}
	parent := propagation.TraceContext{}.Extract(ctx, carrier)
	if !trace.SpanContextFromContext(parent).IsValid() {
		return nil, nil
	}
	_, s := tracer.Start(parent, "gym.run", trace.WithAttributes(
		attribute.String("nemo.gym.process.service", serviceName), attribute.Int("process.pid", os.Getpid())))
	return s, []trace.Link{{SpanContext: s.SpanContext(), Attributes: []attribute.KeyValue{attribute.String("nemo.gym.link", "process")}}}
}

func run() int {
	server := flag.String("server", "agent", "Gym server name; service.name is nemo-gym/<server>")
	rollouts := flag.Int("rollouts", 3, "number of rollouts to simulate")
	sandboxProvider := flag.String("sandbox-provider", "local", "nemo.gym.sandbox.provider attribute of sandbox.exec spans")
	rolloutDur := flag.Duration("rollout-duration", 30*time.Millisecond, "wall time of one rollout")
	exitCode := flag.Int("exit-code", 0, "exit status after flushing all providers")
	printEnv := flag.Bool("print-env", false, "print the OTEL_* / NEMO_GYM_* environment seen (header values redacted to a sha256 prefix), then continue")
	sleepAfter := flag.Duration("sleep-after", 0, "after sending and flushing, stay alive this long before shutting down")
	flushTimeout := flag.Duration("flush-timeout", 10*time.Second, "bound on the final ForceFlush+Shutdown of all providers")
	errorEvery := flag.Int("error-every", 0, "every N-th rollout (N, 2N, ...) fails: its gym.rollout span gets status Error and, with logs on, an ERROR log record; 0: none")
	names := flag.String("names", "legacy", "telemetry names: legacy (gym.verify.count, nemo.gym.verify.result, sandbox.exec) or gym (NeMo Gym's real names, spans and resource attributes, Lens' Slurm identity included; see gymnames.go)")
	outcomes := flag.String("outcomes", "success", "with --names gym, the nemo.gym.rollout.outcome vocabulary: success (success/failure) or scored (scored/dropped)")
	flag.Parse()
	if *names != "legacy" && *names != "gym" {
		fmt.Fprintf(os.Stderr, "gym-standin: --names %q: expected legacy or gym\n", *names)
		return 2
	}
	words, ok := outcomeWords[*outcomes]
	if !ok {
		fmt.Fprintf(os.Stderr, "gym-standin: --outcomes %q: expected success or scored\n", *outcomes)
		return 2
	}

	out := func(format string, a ...any) { fmt.Printf("gym-standin: "+format+"\n", a...) }
	if *printEnv {
		printEnvironment()
	}

	sigCtx, stop := context.WithCancel(context.Background())
	defer stop()
	sigCh := make(chan os.Signal, 1)
	signal.Notify(sigCh, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sigCh
		if s == syscall.SIGINT {
			gotSignal.Store(130)
		} else {
			gotSignal.Store(143)
		}
		stop()
	}()

	serviceName := "nemo-gym/" + *server
	if v := os.Getenv("NEMO_GYM_OTEL_ENABLED"); v != "1" {
		out("NEMO_GYM_OTEL_ENABLED=%q is not \"1\": telemetry off, nothing sent (service=%s rollouts=%d)", v, serviceName, *rollouts)
		time.Sleep(time.Duration(*rollouts) * *rolloutDur)
		if !sleepCtx(sigCtx, *sleepAfter) {
			return signalExit(sigCtx)
		}
		return *exitCode
	}

	runID := os.Getenv("NEMO_GYM_OTEL_RUN_ID")
	groups, groupsDesc := spanGroups(os.Getenv("NEMO_GYM_OTEL_SPAN_GROUPS"))
	logsOn := truthy(os.Getenv("NEMO_GYM_OTEL_LOGS_ENABLED"))

	var otelErrors atomic.Int64
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		otelErrors.Add(1)
		fmt.Fprintf(os.Stderr, "gym-standin: otel error: %v\n", err)
	}))

	ctx := context.Background()
	res, err := resource.New(ctx,
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(attribute.String("service.name", serviceName)),
	)
	if *names == "gym" && err == nil {
		res, err = resource.Merge(res, resource.NewSchemaless(gymResource(*server, os.Getenv("NEMO_GYM_OTEL_RUN_ID"))...))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gym-standin: resource: %v\n", err)
	}

	// Traces.
	traceProto := protocol("TRACES")
	var spanExp sdktrace.SpanExporter
	if traceProto == "grpc" {
		spanExp, err = otlptracegrpc.New(ctx)
	} else {
		spanExp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gym-standin: trace exporter: %v\n", err)
		return 70
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(spanExp, sdktrace.WithBatchTimeout(500*time.Millisecond)))

	// Metrics.
	metricProto := protocol("METRICS")
	var metricExp sdkmetric.Exporter
	if metricProto == "grpc" {
		metricExp, err = otlpmetricgrpc.New(ctx)
	} else {
		metricExp, err = otlpmetrichttp.New(ctx)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gym-standin: metric exporter: %v\n", err)
		return 70
	}
	var readerOpts []sdkmetric.PeriodicReaderOption
	if os.Getenv("OTEL_METRIC_EXPORT_INTERVAL") == "" {
		readerOpts = append(readerOpts, sdkmetric.WithInterval(time.Second))
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metricExp, readerOpts...)))

	// Logs: gRPC only, like Gym.
	var lp *sdklog.LoggerProvider
	if logsOn {
		logExp, err := otlploggrpc.New(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gym-standin: log exporter: %v\n", err)
			return 70
		}
		lp = sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(sdklog.NewBatchProcessor(logExp, sdklog.WithExportInterval(500*time.Millisecond))))
	}

	tracer := tp.Tracer(scopeName)
	meter := mp.Meter(scopeName)
	durHist, _ := meter.Float64Histogram("gym.rollout.duration_ms", metric.WithUnit("ms"), metric.WithDescription("Wall time of one rollout"))
	verifyCount, _ := meter.Int64Counter("gym.verify.count", metric.WithDescription("Number of verify calls"))
	var logger otellog.Logger
	if lp != nil {
		logger = lp.Logger(scopeName)
	}
	proc, links := processSpan(ctx, tracer, serviceName)
	procSpans := 0
	endProc := func() {}
	if proc != nil {
		procSpans = 1
		pc := proc.SpanContext()
		out("process span trace=%s span=%s parent=%s", pc.TraceID(), pc.SpanID(), os.Getenv("TRACEPARENT"))
		endProc = func() { proc.End() }
	}

	if *names == "gym" {
		g := newGymRun(meter)
		g.tracer, g.logger, g.groups, g.server, g.runID = tracer, logger, groups, *server, runID
		g.provider, g.outcomes, g.rolloutDur, g.errorEvery, g.links = *sandboxProvider, words, *rolloutDur, *errorEvery, links
		g.last = *rollouts - 1
		pctx := ctx
		if proc != nil {
			pctx = trace.ContextWithSpan(ctx, proc)
		}
		spans, logs, n := procSpans+g.startup(pctx, *rolloutDur), 0, 0
		for ; n < *rollouts && sigCtx.Err() == nil; n++ {
			s, l := g.rollout(ctx, n)
			spans, logs = spans+s, logs+l
		}
		endProc()
		flushErr := flushAll(*flushTimeout, tp, mp, lp, *sleepAfter <= 0)
		status := "ok"
		if flushErr != nil || otelErrors.Load() > 0 {
			status = fmt.Sprintf("failed handler_errors=%d", otelErrors.Load())
		}
		out("sent names=gym service=%s run_id=%q rollouts=%d spans=%d groups=%s verified=%d verify_ok=%d logs=%d flush=%s exit=%d",
			serviceName, runID, n, spans, groupsDesc, g.verified, g.okVer, logs, status, *exitCode)
		if !sleepCtx(sigCtx, *sleepAfter) {
			_ = flushAll(*flushTimeout, tp, mp, lp, true)
			return signalExit(sigCtx)
		}
		if *sleepAfter > 0 {
			_ = flushAll(*flushTimeout, tp, mp, lp, true)
		}
		return *exitCode
	}

	runAttr := attribute.String("nemo.gym.run_id", runID)
	serverAttr := attribute.String("nemo.gym.server", *server)
	spans, logs, verifies := procSpans, 0, 0
	var firstTrace string
	for i := 0; i < *rollouts && sigCtx.Err() == nil; i++ {
		start := time.Now()
		rctx, root := tracer.Start(ctx, "gym.rollout", trace.WithNewRoot(), trace.WithLinks(links...),
			trace.WithAttributes(runAttr, serverAttr, attribute.Int("nemo.gym.rollout.index", i)))
		spans++
		if firstTrace == "" {
			firstTrace = root.SpanContext().TraceID().String()
		}
		step := *rolloutDur / 3
		time.Sleep(step)
		if groups["sandbox"] {
			_, s := tracer.Start(rctx, "sandbox.exec", trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(runAttr, attribute.String("nemo.gym.sandbox.provider", *sandboxProvider)))
			time.Sleep(step)
			s.End()
			spans++
		} else {
			time.Sleep(step)
		}
		passed := i%4 != 3
		result := "pass"
		if !passed {
			result = "fail"
		}
		if groups["verify"] {
			_, s := tracer.Start(rctx, "gym.verify", trace.WithAttributes(runAttr, attribute.String("nemo.gym.verify.result", result)))
			time.Sleep(step)
			s.End()
			spans++
		} else {
			time.Sleep(step)
		}
		verifyCount.Add(rctx, 1, metric.WithAttributes(serverAttr, attribute.String("result", result)))
		verifies++
		if logger != nil {
			var rec otellog.Record
			now := time.Now()
			rec.SetTimestamp(now)
			rec.SetObservedTimestamp(now)
			rec.SetSeverity(otellog.SeverityInfo)
			rec.SetSeverityText("INFO")
			rec.SetBody(attribute.StringValue(fmt.Sprintf("rollout %d finished: verify %s", i, result)))
			rec.AddAttributes(
				attribute.String("nemo.gym.run_id", runID),
				attribute.Int("nemo.gym.rollout.index", i),
			)
			logger.Emit(rctx, rec) // rctx carries the rollout span: the record gets its trace and span ids
			logs++
		}
		if *errorEvery > 0 && (i+1)%*errorEvery == 0 {
			root.SetStatus(codes.Error, fmt.Sprintf("rollout %d failed", i))
			if logger != nil {
				var rec otellog.Record
				now := time.Now()
				rec.SetTimestamp(now)
				rec.SetObservedTimestamp(now)
				rec.SetSeverity(otellog.SeverityError)
				rec.SetSeverityText("ERROR")
				rec.SetBody(attribute.StringValue(fmt.Sprintf("rollout %d failed", i)))
				rec.AddAttributes(attribute.String("nemo.gym.run_id", runID), attribute.Int("nemo.gym.rollout.index", i))
				logger.Emit(rctx, rec)
				logs++
			}
		}
		root.End()
		durHist.Record(ctx, float64(time.Since(start).Microseconds())/1000.0, metric.WithAttributes(serverAttr))
	}

	endProc()

	// Final flush of everything, in parallel under one deadline. Without
	// --sleep-after the providers are shut down in the same step, so a hung
	// backend costs at most one --flush-timeout.
	final := *sleepAfter <= 0
	flushErr := flushAll(*flushTimeout, tp, mp, lp, final)
	status := "ok"
	if flushErr != nil || otelErrors.Load() > 0 {
		msg := "none"
		if flushErr != nil {
			msg = strings.Join(strings.Fields(flushErr.Error()), " ")
		}
		status = fmt.Sprintf("failed handler_errors=%d flush_error=%q", otelErrors.Load(), msg)
	}
	logsDesc := "off"
	if logsOn {
		logsDesc = fmt.Sprintf("%d(grpc->%s)", logs, firstNonEmpty(os.Getenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"), os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "default"))
	}
	out("sent service=%s run_id=%q rollouts=%d spans=%d groups=%s metrics=[gym.rollout.duration_ms:%d gym.verify.count:%d] logs=%s traces=%s metrics_protocol=%s endpoint=%s first_trace=%s flush=%s exit=%d",
		serviceName, runID, verifies, spans, groupsDesc, verifies, verifies, logsDesc, traceProto, metricProto,
		firstNonEmpty(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "default"), firstTrace, status, *exitCode)

	if !sleepCtx(sigCtx, *sleepAfter) {
		_ = flushAll(*flushTimeout, tp, mp, lp, true)
		return signalExit(sigCtx)
	}
	if final {
		return *exitCode
	}
	if err := flushAll(*flushTimeout, tp, mp, lp, true); err != nil {
		fmt.Fprintf(os.Stderr, "gym-standin: shutdown: %v\n", err)
	}
	return *exitCode
}

// flushAll runs ForceFlush (and Shutdown when shutdown is set) on every
// provider concurrently, bounded by timeout.
func flushAll(timeout time.Duration, tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider, lp *sdklog.LoggerProvider, shutdown bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	type flusher interface {
		ForceFlush(context.Context) error
		Shutdown(context.Context) error
	}
	provs := map[string]flusher{"traces": tp, "metrics": mp}
	if lp != nil {
		provs["logs"] = lp
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for name, p := range provs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := p.ForceFlush(ctx)
			if shutdown {
				err = errors.Join(err, p.Shutdown(ctx))
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// protocol returns the OTLP protocol for a signal from the standard env.
func protocol(signal string) string {
	p := firstNonEmpty(os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")
	switch p {
	case "grpc":
		return "grpc"
	case "http/protobuf":
	default:
		fmt.Fprintf(os.Stderr, "gym-standin: protocol %q not supported for %s, using http/protobuf\n", p, strings.ToLower(signal))
	}
	return "http/protobuf"
}

func spanGroups(v string) (map[string]bool, string) {
	all := map[string]bool{"default": true, "verify": true, "sandbox": true, "concurrency": true, "model_call": true}
	v = strings.TrimSpace(v)
	if v == "" || v == "all" || v == "*" {
		return all, "all"
	}
	g := map[string]bool{"default": true} // the rollout root span is always emitted
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			g[s] = true
		}
	}
	return g, v
}

func truthy(v string) bool {
	v = strings.ToLower(strings.TrimSpace(v))
	return v == "1" || v == "true"
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

var gotSignal atomic.Int32

// signalExit is the conventional 128+signal status after SIGTERM/SIGINT.
func signalExit(ctx context.Context) int {
	fmt.Println("gym-standin: stopped by signal")
	return int(gotSignal.Load())
}

// printEnvironment prints the OTEL_* and NEMO_GYM_* variables, sorted. Header
// values (which carry the bearer token) are replaced by the length and the
// first 12 hex digits of the sha256 of the URL-decoded value, so a test can check the token without it landing in a log.
func printEnvironment() {
	var lines []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "OTEL_") && !strings.HasPrefix(k, "NEMO_GYM_") {
			continue
		}
		if strings.Contains(k, "HEADERS") {
			v = redactHeaders(v)
		}
		lines = append(lines, k+"="+v)
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println("gym-standin: env " + l)
	}
}

func redactHeaders(v string) string {
	var parts []string
	for _, h := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(h, "=")
		if !ok {
			parts = append(parts, "<malformed>")
			continue
		}
		if dec, err := url.PathUnescape(val); err == nil { // decoded as the SDK does
			val = strings.TrimSpace(dec)
		}
		sum := sha256.Sum256([]byte(val))
		parts = append(parts, fmt.Sprintf("%s=<redacted len=%d sha256=%s>", strings.TrimSpace(k), len(val), hex.EncodeToString(sum[:])[:12]))
	}
	return strings.Join(parts, ",")
}
