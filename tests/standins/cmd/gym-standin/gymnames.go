package main

import (
	"context"
	"crypto/sha1"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Gym's real telemetry, as NeMo Gym's nemo_gym/telemetry emits it through
// nemo-lens (NVIDIA-NeMo/Gym: gym_metrics.py at
// fdedac3de564d871aee0783a10796fcb9d4dd45d, metrics.py, endpoints.py,
// span_groups.py and sandbox/api.py at
// 2e5014086a172aa34654e195e504df496e9c95f5, setup.py's resource attributes;
// NVIDIA-NeMo/Lens: src/nemo/lens/instruments/gym.py at
// 9f7c6bf0111e201e7f2cc6697ea67b4b57a69991 and
// src/nemo/lens/resources/slurm.py at
// 04914a2ae371803653772a9b069d2216fdbaa9bd).
const (
	gymRolloutDuration = "gym.rollout.duration_ms"                // histogram, ms, no attributes (Lens)
	gymVerifyDuration  = "gym.verify.duration_ms"                 // histogram, ms, no attributes (Lens)
	gymVerifySuccess   = "gym.verify.success_rate"                // gauge, cumulative fraction per process (Lens)
	gymRolloutDone     = "gym.rollout.completed_total"            // counter, nemo.gym.rollout.outcome
	gymModelCall       = "gym.model.call_duration_ms"             // histogram, nemo.gym.model.dialect, nemo.gym.server.name
	gymModelTTFB       = "gym.model.time_to_first_byte_ms"        // histogram, same attributes
	gymSandboxStartup  = "gym.sandbox.startup_duration_ms"        // histogram, nemo.gym.sandbox.provider
	gymQueueWait       = "gym.concurrency.queue_wait_duration_ms" // histogram, nemo.gym.concurrency.site
	gymHTTPRetry       = "gym.http.retry_total"                   // counter, nemo.gym.http.retry_reason
	gymHTTPTimeout     = "gym.http.timeout_total"                 // counter, nemo.gym.http.internal (bool)

	// Gym's newer names: nemo_gym/telemetry/token_capture_metrics.py at
	// 68fb1be02d70a15d31573be05e99f70df973311f; gym_metrics.py (sandbox
	// lifecycle, connection pool) as read in the code index beside
	// fdedac3; startup.py at 27c821d975210e4f5f1a6c830ec64ff4f3ea6b8c;
	// gym.servers.active: Lens' instruments/gym.py at 9f7c6bf.
	gymTCOpDuration   = "gym.token_capture.operation.duration_ms"    // histogram, ms, operation, implementation, size_class
	gymTCOpTokens     = "gym.token_capture.operation.tokens_total"   // counter, {token}, operation
	gymTCOutcome      = "gym.token_capture.outcome_total"            // observable counter, outcome, reason
	gymTCDigestCalls  = "gym.token_capture.digest.calls_total"       // observable counter, digest
	gymTCDigestBytes  = "gym.token_capture.digest.bytes_total"       // observable counter, By, digest
	gymTCCacheSize    = "gym.token_capture.cache.size"               // observable up-down counter, cache
	gymSandboxActive  = "gym.sandbox.active"                         // up-down counter, {sandbox}, provider
	gymSandboxExec    = "gym.sandbox.exec_duration_ms"               // histogram, ms, provider
	gymSandboxRetry   = "gym.sandbox.create_retry_total"             // counter, provider
	gymPoolQueue      = "gym.http.connection_pool.queue_duration_ms" // histogram, ms, queue_constraint, queue_outcome, destination server
	gymPoolConnects   = "gym.http.connection_pool.connect_total"     // observable counter, {connection}, destination server
	gymServersActive  = "gym.servers.active"                         // gauge, the orchestrator only
	tokensPerRollout  = 1500                                         // the stand-in's captured tokens per rollout
	digestBytesPerHit = 6000                                         // bytes one digest hashes
)

// outcomeWords are the two vocabularies of nemo.gym.rollout.outcome seen
// across Gym versions: success/failure (gym_metrics.py at fdedac3) and
// scored/dropped (later versions, which also carry nemo.gym.failure_class
// on a dropped rollout).
var outcomeWords = map[string][2]string{
	"success": {"success", "failure"},
	"scored":  {"scored", "dropped"},
}

// gymResource is what Gym's setup.py and Lens' detect_slurm put on a Gym
// server's resource: the server's identity and, under Slurm, Lens' Slurm
// attributes derived from the process's own environment.
func gymResource(server, runID string) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		attribute.String("nemo.gym.version", "0.3.0"),
		attribute.String("nemo.gym.server.name", server),
		attribute.String("nemo.gym.server.type", "responses_api_agents"),
		attribute.String("nemo.gym.service_group", "nemo-gym"),
	}
	if runID != "" {
		kv = append(kv, attribute.String("nemo.run.id", runID))
	}
	return append(kv, lensSlurm()...)
}

// lensSlurm derives Lens' Slurm resource attributes from this process's
// environment, as Lens' derive_slurm_resource_attributes does (a subset:
// the ids, restart count, cluster, user and nv.dl.job.uuid/run.uuid), and
// leaves out every key OTEL_RESOURCE_ATTRIBUTES carries: Lens' detect_slurm
// (NVIDIA-NeMo/Lens src/nemo/lens/resources/slurm.py at 04914a2) takes
// the launch's values as authoritative and never overwrites them with
// derived ones (the SDK's resource already holds them: WithFromEnv).
func lensSlurm() []attribute.KeyValue {
	inherited := map[string]bool{}
	for _, item := range strings.Split(os.Getenv("OTEL_RESOURCE_ATTRIBUTES"), ",") {
		if k, _, ok := strings.Cut(item, "="); ok && strings.TrimSpace(k) != "" {
			inherited[strings.TrimSpace(k)] = true
		}
	}
	var out []attribute.KeyValue
	for _, a := range deriveLensSlurm() {
		if !inherited[string(a.Key)] {
			out = append(out, a)
		}
	}
	return out
}

// deriveLensSlurm is Lens' derivation from the Slurm variables alone.
func deriveLensSlurm() []attribute.KeyValue {
	raw := os.Getenv("SLURM_JOB_ID")
	if raw == "" {
		return nil
	}
	arrayJob := os.Getenv("SLURM_ARRAY_JOB_ID")
	task, isArray := os.LookupEnv("SLURM_ARRAY_TASK_ID")
	if task == "" {
		task = "0"
	}
	jobID, key := raw, raw
	if isArray {
		key = firstNonEmpty(arrayJob, "nojob")
		if arrayJob != "" {
			jobID = arrayJob + "_" + task
		}
	}
	if arrayJob == "" {
		arrayJob = raw
	}
	restart, err := strconv.Atoi(os.Getenv("SLURM_RESTART_COUNT"))
	if err != nil {
		restart = 0
	}
	cluster := firstNonEmpty(os.Getenv("SLURM_CLUSTER_NAME"), "nocluster")
	run := "nemo.lens.run/" + cluster + "/" + key
	if !isArray {
		run += "/sr" + strconv.Itoa(restart)
	}
	kv := []attribute.KeyValue{
		attribute.String("slurm.job.id", jobID),
		attribute.String("slurm.job.id.raw", raw),
		attribute.String("slurm.array.job_id", arrayJob),
		attribute.String("slurm.array.task_id", task),
		attribute.Int("slurm.restart_count", restart),
		attribute.String("nv.dl.job.uuid", uuid5URL("nemo.lens.job/"+cluster+"/"+key)),
		attribute.String("nv.dl.run.uuid", uuid5URL(run)),
	}
	for env, k := range map[string]string{"SLURM_CLUSTER_NAME": "slurm.cluster.name", "SLURM_JOB_USER": "slurm.job.user", "SLURM_JOB_NAME": "slurm.job.name"} {
		if v := os.Getenv(env); v != "" {
			kv = append(kv, attribute.String(k, v))
		}
	}
	return kv
}

// uuid5URL is Python's str(uuid.uuid5(uuid.NAMESPACE_URL, name)).
func uuid5URL(name string) string {
	ns := []byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	h := sha1.New()
	h.Write(ns)
	h.Write([]byte(name))
	u := h.Sum(nil)[:16]
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// gymRun is one run of fake rollouts under Gym's real names.
type gymRun struct {
	tracer          trace.Tracer
	logger          otellog.Logger
	groups          map[string]bool
	server, runID   string
	provider        string
	outcomes        [2]string
	rolloutDur      time.Duration
	errorEvery      int
	rolloutHist     metric.Float64Histogram
	verifyHist      metric.Float64Histogram
	verifyRate      metric.Float64Gauge
	completed       metric.Int64Counter
	modelCall       metric.Float64Histogram
	modelTTFB       metric.Float64Histogram
	sandboxStart    metric.Float64Histogram
	queueWait       metric.Float64Histogram
	retries         metric.Int64Counter
	timeouts        metric.Int64Counter
	verified, okVer int
	last            int // the last rollout's index (its sandbox stays held)
	// The newer instruments and the in-process totals their observable
	// callbacks read (as Gym's do: an increment per event, the SDK reads
	// the totals at each export).
	tcOpDuration  metric.Float64Histogram
	tcOpTokens    metric.Int64Counter
	sandboxActive metric.Int64UpDownCounter
	sandboxExec   metric.Float64Histogram
	sandboxRetry  metric.Int64Counter
	poolQueue     metric.Float64Histogram
	serversActive metric.Int64Gauge
	captured      atomic.Int64 // token captures made
	connects      atomic.Int64 // connection attempts to policy_model
	// links: each rollout's links (to the process's root span; none
	// without TRACEPARENT).
	links []trace.Link
}

func newGymRun(meter metric.Meter) *gymRun {
	g := &gymRun{}
	g.rolloutHist, _ = meter.Float64Histogram(gymRolloutDuration, metric.WithUnit("ms"), metric.WithDescription("Rollout collection duration in milliseconds."))
	g.verifyHist, _ = meter.Float64Histogram(gymVerifyDuration, metric.WithUnit("ms"), metric.WithDescription("Verification endpoint duration in milliseconds."))
	g.verifyRate, _ = meter.Float64Gauge(gymVerifySuccess, metric.WithDescription("Fraction of successful verifications."))
	g.completed, _ = meter.Int64Counter(gymRolloutDone, metric.WithUnit("1"), metric.WithDescription("Count of completed rollouts by outcome."))
	g.modelCall, _ = meter.Float64Histogram(gymModelCall, metric.WithUnit("ms"), metric.WithDescription("Wall-clock duration of one model-server dialect call."))
	g.modelTTFB, _ = meter.Float64Histogram(gymModelTTFB, metric.WithUnit("ms"), metric.WithDescription("Time to first response byte for one model-server call."))
	g.sandboxStart, _ = meter.Float64Histogram(gymSandboxStartup, metric.WithUnit("ms"), metric.WithDescription("Wall-clock time to provision one sandbox."))
	g.queueWait, _ = meter.Float64Histogram(gymQueueWait, metric.WithUnit("ms"), metric.WithDescription("Time spent waiting to acquire a Gym concurrency-limiting semaphore."))
	g.retries, _ = meter.Int64Counter(gymHTTPRetry, metric.WithUnit("1"), metric.WithDescription("Count of outbound HTTP request retries by reason."))
	g.timeouts, _ = meter.Int64Counter(gymHTTPTimeout, metric.WithUnit("1"), metric.WithDescription("Count of outbound HTTP calls that timed out."))
	g.tcOpDuration, _ = meter.Float64Histogram(gymTCOpDuration, metric.WithUnit("ms"), metric.WithDescription("Duration of one token-capture operation."))
	g.tcOpTokens, _ = meter.Int64Counter(gymTCOpTokens, metric.WithUnit("{token}"), metric.WithDescription("Tokens of the records token-capture operations handled."))
	g.sandboxActive, _ = meter.Int64UpDownCounter(gymSandboxActive, metric.WithUnit("{sandbox}"), metric.WithDescription("Sandboxes this process currently holds, from provider create to release."))
	g.sandboxExec, _ = meter.Float64Histogram(gymSandboxExec, metric.WithUnit("ms"), metric.WithDescription("Wall-clock time to run one command inside a sandbox."))
	g.sandboxRetry, _ = meter.Int64Counter(gymSandboxRetry, metric.WithUnit("1"), metric.WithDescription("Sandbox-create attempts a provider retried."))
	g.poolQueue, _ = meter.Float64Histogram(gymPoolQueue, metric.WithUnit("ms"), metric.WithDescription("Time one queued connection acquisition waited for an aiohttp pool slot."))
	g.serversActive, _ = meter.Int64Gauge(gymServersActive, metric.WithDescription("Number of active Gym servers."))
	observe := func(name, unit, desc string, upDown bool, points func() []obs) {
		cb := func(_ context.Context, o metric.Int64Observer) error {
			for _, p := range points() {
				o.Observe(p.v, metric.WithAttributes(p.attrs...))
			}
			return nil
		}
		if upDown {
			_, _ = meter.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithInt64Callback(cb))
		} else {
			_, _ = meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithInt64Callback(cb))
		}
	}
	observe(gymTCOutcome, "1", "Token-capture decisions and failures.", false, func() []obs {
		return []obs{{g.captured.Load(), []attribute.KeyValue{attribute.String("nemo.gym.token_capture.outcome", "captured"), attribute.String("nemo.gym.token_capture.reason", "none")}}}
	})
	digest := []attribute.KeyValue{attribute.String("nemo.gym.token_capture.digest", "prompt")}
	observe(gymTCDigestCalls, "1", "Token-capture hash computations.", false, func() []obs { return []obs{{g.captured.Load(), digest}} })
	observe(gymTCDigestBytes, "By", "Bytes hashed by token capture.", false, func() []obs { return []obs{{g.captured.Load() * digestBytesPerHit, digest}} })
	observe(gymTCCacheSize, "1", "Current size of in-process token-capture caches.", true, func() []obs {
		return []obs{{min(g.captured.Load(), 4), []attribute.KeyValue{attribute.String("nemo.gym.token_capture.cache", "fingerprint")}}}
	})
	observe(gymPoolConnects, "{connection}", "Outbound aiohttp connection attempts (connect() calls), including attempts that later fail or are abandoned.", false, func() []obs {
		return []obs{{g.connects.Load(), []attribute.KeyValue{attribute.String("nemo.gym.http.destination.server.name", "policy_model")}}}
	})
	return g
}

// obs is one observation of an observable instrument.
type obs struct {
	v     int64
	attrs []attribute.KeyValue
}

// startupStages are the supervisor's stages the stand-in times (Gym's
// test of startup.py at 27c821d names load_config and spawn_servers; its
// executor's wait for the model endpoints is wait_for_model_endpoints),
// and serverStages a server's (venv_setup, interpreter_start and
// uvicorn_startup are startup.py's constants; load_config the server's
// own mark in the same test).
var (
	startupStages = []string{"load_config", "spawn_servers", "wait_for_model_endpoints"}
	serverStages  = []string{"venv_setup", "interpreter_start", "load_config", "uvicorn_startup"}
)

// startup emits Gym's start-up as its supervisor and one server report
// it: gym.startup (a child of parent when valid, else a root) with a
// gym.startup.<stage> per stage and a gym.startup.server for the server
// (spawn to ready) whose child is the server's gym.server.startup with its
// gym.server.startup.<stage> spans, each stage step long. It sets
// gym.servers.active to 1 once the server is ready, as the orchestrator
// does, and returns the spans it emitted.
func (g *gymRun) startup(ctx context.Context, step time.Duration) int {
	sctx, root := g.tracer.Start(ctx, "gym.startup")
	spans := 1
	srvAttrs := []attribute.KeyValue{attribute.String("nemo.gym.server.name", g.server), attribute.String("nemo.gym.server.type", "responses_api_agents")}
	var spawnCtx context.Context
	var spawn trace.Span
	for _, st := range startupStages {
		_, s := g.tracer.Start(sctx, "gym.startup."+st)
		if st == "spawn_servers" {
			spawnCtx, spawn = g.tracer.Start(sctx, "gym.startup.server", trace.WithAttributes(srvAttrs...))
			spans++
			// The server's own start-up, inside the supervisor's span for it.
			sroot, rs := g.tracer.Start(spawnCtx, "gym.server.startup", trace.WithAttributes(append(srvAttrs, attribute.Bool("nemo.gym.server.worker", false), attribute.Int("process.pid", os.Getpid()))...))
			for _, ss := range serverStages {
				_, x := g.tracer.Start(sroot, "gym.server.startup."+ss, trace.WithAttributes(srvAttrs...))
				time.Sleep(step / time.Duration(len(serverStages)))
				x.End()
			}
			rs.End()
			spans += 1 + len(serverStages)
		} else {
			time.Sleep(step)
		}
		if st == "wait_for_model_endpoints" && spawn != nil {
			spawn.End() // the server answered its health probe
			g.serversActive.Record(ctx, 1)
		}
		s.End()
		spans++
	}
	root.End()
	return spans
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// rollout runs rollout i: a gym.rollout span (the agent's /run) with a
// model call (gym.model.chat_completions, and with the sandbox group
// gym.sandbox.start and gym.sandbox.exec) and a verification (gym.verify
// with the verify group). Rollout i's verification fails (the verifier
// raises: span status Error, not counted as a success) when i%4 == 3, and
// that rollout's outcome is the vocabulary's second word. It returns the
// spans and log records it emitted.
func (g *gymRun) rollout(ctx context.Context, i int) (spans, logs int) {
	start := time.Now()
	step := g.rolloutDur / 4
	rid := attribute.String("nemo.gym.rollout.id", fmt.Sprintf("%s-%d", g.runID, i))
	srv := attribute.String("nemo.gym.server.name", g.server)
	if g.groups["concurrency"] {
		g.queueWait.Record(ctx, ms(step/10), metric.WithAttributes(attribute.String("nemo.gym.concurrency.site", "rollout_driver")))
	}
	rctx, root := g.tracer.Start(ctx, "gym.rollout", trace.WithNewRoot(), trace.WithLinks(g.links...), trace.WithAttributes(rid, srv))
	spans++

	// The model call: time to first byte, then the rest of the answer.
	callStart := time.Now()
	dialect := attribute.String("nemo.gym.model.dialect", "chat_completions")
	policy := attribute.String("nemo.gym.server.name", "policy_model")
	_, mc := g.tracer.Start(rctx, "gym.model.chat_completions", trace.WithAttributes(rid))
	time.Sleep(step / 3)
	g.modelTTFB.Record(rctx, ms(time.Since(callStart)), metric.WithAttributes(dialect, policy))
	time.Sleep(step - step/3)
	mc.End()
	spans++
	g.modelCall.Record(rctx, ms(time.Since(callStart)), metric.WithAttributes(dialect, policy))
	// The call's connection: every other one queued for a pool slot.
	g.connects.Add(1)
	if i%2 == 0 {
		g.poolQueue.Record(rctx, ms(step/20), metric.WithAttributes(attribute.String("nemo.gym.http.connection_pool.queue_constraint", "total"),
			attribute.String("nemo.gym.http.connection_pool.queue_outcome", "ok"), attribute.String("nemo.gym.http.destination.server.name", "policy_model")))
	}
	// Its tokens captured for training.
	g.tcOpDuration.Record(rctx, ms(step/50), metric.WithAttributes(attribute.String("nemo.gym.token_capture.operation", "sink.put"),
		attribute.String("nemo.gym.token_capture.implementation", "TokenCaptureStore"), attribute.String("nemo.gym.token_capture.size_class", "lt_4k")))
	g.tcOpTokens.Add(rctx, tokensPerRollout, metric.WithAttributes(attribute.String("nemo.gym.token_capture.operation", "sink.put")))
	g.captured.Add(1)
	if i%3 == 2 {
		g.retries.Add(rctx, 1, metric.WithAttributes(attribute.String("nemo.gym.http.retry_reason", "server_disconnected")))
	}
	if i%5 == 4 {
		g.timeouts.Add(rctx, 1, metric.WithAttributes(attribute.Bool("nemo.gym.http.internal", true)))
	}

	prov := attribute.String("nemo.gym.sandbox.provider", g.provider)
	if g.groups["sandbox"] {
		sbStart := time.Now()
		_, s := g.tracer.Start(rctx, "gym.sandbox.start", trace.WithAttributes(prov))
		time.Sleep(step / 2)
		s.End()
		g.sandboxStart.Record(rctx, ms(time.Since(sbStart)), metric.WithAttributes(prov))
		g.sandboxActive.Add(rctx, 1, metric.WithAttributes(prov))
		if i%4 == 1 {
			g.sandboxRetry.Add(rctx, 1, metric.WithAttributes(prov))
		}
		exStart := time.Now()
		_, s = g.tracer.Start(rctx, "gym.sandbox.exec", trace.WithAttributes(prov,
			attribute.Int("nemo.gym.sandbox.return_code", 0)))
		time.Sleep(step / 2)
		s.End()
		g.sandboxExec.Record(rctx, ms(time.Since(exStart)), metric.WithAttributes(prov))
		// Every sandbox is released but the last rollout's.
		if i != g.last {
			g.sandboxActive.Add(rctx, -1, metric.WithAttributes(prov))
		}
		spans += 2
	} else {
		time.Sleep(step)
	}

	ok := i%4 != 3
	if g.groups["verify"] {
		vStart := time.Now()
		_, s := g.tracer.Start(rctx, "gym.verify", trace.WithAttributes(rid, srv))
		time.Sleep(step)
		if !ok {
			s.SetStatus(codes.Error, "verifier raised")
		}
		s.End()
		spans++
		g.verified++
		if ok {
			g.okVer++
		}
		g.verifyHist.Record(rctx, ms(time.Since(vStart)))
		g.verifyRate.Record(rctx, float64(g.okVer)/float64(g.verified))
	} else {
		time.Sleep(step)
	}
	outcome := g.outcomes[0]
	outAttrs := []attribute.KeyValue{attribute.String("nemo.gym.rollout.outcome", outcome)}
	if !ok {
		outcome = g.outcomes[1]
		outAttrs = []attribute.KeyValue{attribute.String("nemo.gym.rollout.outcome", outcome)}
		if outcome == "dropped" {
			outAttrs = append(outAttrs, attribute.String("nemo.gym.failure_class", "verifier_error"))
		}
	}
	g.completed.Add(rctx, 1, metric.WithAttributes(outAttrs...))
	if g.logger != nil {
		var rec otellog.Record
		now := time.Now()
		rec.SetTimestamp(now)
		rec.SetObservedTimestamp(now)
		rec.SetSeverity(otellog.SeverityInfo)
		rec.SetSeverityText("INFO")
		rec.SetBody(attribute.StringValue(fmt.Sprintf("rollout %d finished: %s", i, outcome)))
		g.logger.Emit(rctx, rec)
		logs++
	}
	if g.errorEvery > 0 && (i+1)%g.errorEvery == 0 {
		root.SetStatus(codes.Error, fmt.Sprintf("rollout %d failed", i))
	}
	root.End()
	g.rolloutHist.Record(ctx, ms(time.Since(start)))
	return spans, logs
}
