package plugin

import (
	"net/url"
	"strconv"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/lifecycle"
)

// TaskEnv is the env every task of the job on this node gets when the
// node's collector is ready: Gym's switches and the OTLP exporter settings
// pointing at this node's collector on 127.0.0.1, with the per-job receiver
// token as the exporter's Authorization header.
func TaskEnv(spec *config.Resolved, f jobfacts.Facts, rep lifecycle.Report) []KV {
	b01 := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	env := []KV{
		// gym_telemetry: false keeps the collector for engine and node
		// metrics only: Gym's own instrumentation stays off.
		{"NEMO_GYM_OTEL_ENABLED", b01(spec.Otel.GymTelemetry)},
		{"NEMO_GYM_OTEL_RUN_ID", jobfacts.RunID(spec, f)},
		{"NEMO_GYM_OTEL_SPAN_GROUPS", spec.Otel.GymSpanGroups},
		{"NEMO_GYM_OTEL_LOGS_ENABLED", b01(spec.Otel.GymLogs)},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:" + strconv.Itoa(rep.Ports.OTLPHTTP)},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"},
		// The OTEL_EXPORTER_OTLP_HEADERS value is a W3C baggage-style list:
		// the space of "Bearer <token>" is percent-encoded.
		{"OTEL_EXPORTER_OTLP_HEADERS", "Authorization=" + url.PathEscape("Bearer "+rep.ReceiverToken)},
	}
	if spec.Otel.GymTelemetry {
		env = append(env,
			KV{"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://127.0.0.1:" + strconv.Itoa(rep.Ports.OTLPGRPC)},
			KV{"OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc"},
		)
	}
	return env
}

// TokenCopies are the names under which Slurm may hand the forwarded token
// to a step's tasks; the steps remove each of them (and otel.token_env).
var TokenCopies = []string{"GYM_OTEL_TOKEN", "SPANK_GYM_OTEL_TOKEN", "SLURM_SPANK_GYM_OTEL_TOKEN"}

// FinalWait is the batch step's final-scrape wait: one scrape interval and
// a second, at most MaxFinalWait seconds.
func FinalWait(o config.Otel) int {
	return min(o.ScrapeIntervalSeconds+1, MaxFinalWait)
}
