package taskenv

import (
	"net/url"
	"strconv"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
	"github.com/gym-otel-spank/gym-otel-spank/internal/contract"
)

// TaskEnv is the env every task of the job on this node gets when the
// node's collector is ready: Gym's switches and the OTLP exporter settings
// pointing at this node's collector on 127.0.0.1 (ports, as the supervisor
// reported them), with the per-job receiver token (receiverToken, from the
// same report) as the exporter's Authorization header.
func TaskEnv(resolved *config.Resolved, f jobfacts.Facts, ports jobdir.Ports, receiverToken string) []record.KV {
	b01 := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	env := []record.KV{
		// gym_telemetry: false keeps the collector for engine and node
		// metrics only: Gym's own instrumentation stays off.
		{Key: "NEMO_GYM_OTEL_ENABLED", Value: b01(resolved.Otel.GymTelemetry)},
		{Key: "NEMO_GYM_OTEL_RUN_ID", Value: jobfacts.RunID(resolved, f)},
		{Key: "NEMO_GYM_OTEL_SPAN_GROUPS", Value: resolved.Otel.GymSpanGroups},
		{Key: "NEMO_GYM_OTEL_LOGS_ENABLED", Value: b01(resolved.Otel.GymLogs)},
		{Key: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://127.0.0.1:" + strconv.Itoa(ports.OTLPHTTP)},
		{Key: "OTEL_EXPORTER_OTLP_PROTOCOL", Value: "http/protobuf"},
		// The OTEL_EXPORTER_OTLP_HEADERS value is a W3C baggage-style list:
		// the space of "Bearer <token>" is percent-encoded.
		{Key: "OTEL_EXPORTER_OTLP_HEADERS", Value: "Authorization=" + url.PathEscape("Bearer "+receiverToken)},
	}
	if resolved.Otel.GymTelemetry {
		env = append(env,
			record.KV{Key: "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", Value: "http://127.0.0.1:" + strconv.Itoa(ports.OTLPGRPC)},
			record.KV{Key: "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", Value: "grpc"},
		)
	}
	return env
}

// TokenCopies are the names under which Slurm may hand the forwarded token
// to a step's tasks; the steps remove each of them (and otel.token_env).
var TokenCopies = []string{contract.JobControlToken, "SPANK_" + contract.JobControlToken, "SLURM_SPANK_" + contract.JobControlToken}
