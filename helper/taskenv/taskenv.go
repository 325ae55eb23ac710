package taskenv

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
)

// TaskEnv is the env every task of the job on this node gets when the
// node's collector is ready: Gym's switches and the OTLP exporter settings
// pointing at this node's collector on 127.0.0.1 (ports, as root's prolog
// chose them and handed them to the supervisor), with the per-job receiver
// token (receiverToken, which root minted and handed down likewise) as the
// exporter's Authorization header.
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
	if f.SLUID != "" {
		// Lens reads the run's SLUID from LENS_SLURM_SLUID (or
		// NV_LAUNCH_SLUID), never from Slurm's own variable.
		env = append(env, record.KV{Key: LensSLUIDEnv, Value: f.SLUID})
	}
	if resolved.Otel.GymTelemetry {
		env = append(env,
			record.KV{Key: "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", Value: "http://127.0.0.1:" + strconv.Itoa(ports.OTLPGRPC)},
			record.KV{Key: "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", Value: "grpc"},
		)
	}
	return env
}

// LensSLUIDEnv is the variable NeMo Lens reads slurm.sluid from
// (src/nemo/lens/resources/slurm.py, derive_slurm_resource_attributes, at
// 04914a2; no released Lens reads it yet).
const LensSLUIDEnv = "LENS_SLURM_SLUID"

// ResourceAttrs are attrs (key and plain value) as root's record carries
// them for the steps (record.Record.ResAttrs): each value percent-encoded
// as OTEL_RESOURCE_ATTRIBUTES carries it (every byte but A-Z a-z 0-9 - . _
// ~, as Lens' format_otel_resource_attributes and Python's quote(safe="")
// do; the OpenTelemetry specification requires "," and "=" encoded and
// allows the rest). A key that the variable cannot carry ("", or one with
// ",", "=", "%" or white space) is left out.
func ResourceAttrs(attrs []record.KV) []record.KV {
	var out []record.KV
	for _, a := range attrs {
		if a.Key == "" || strings.ContainsAny(a.Key, ",=% \t\r\n\x00") {
			continue
		}
		out = append(out, record.KV{Key: a.Key, Value: PercentEncode(a.Value)})
	}
	return out
}

// PercentEncode is s with every byte but the unreserved ones (A-Z a-z 0-9
// - . _ ~) as %XX (upper-case hex).
func PercentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// TokenCopies are the names under which Slurm may hand the forwarded token
// to a step's tasks; the steps remove each of them (and otel.token_env).
var TokenCopies = []string{contract.JobControlToken, "SPANK_" + contract.JobControlToken, "SLURM_SPANK_" + contract.JobControlToken}
