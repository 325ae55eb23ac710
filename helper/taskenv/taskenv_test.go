package taskenv

import (
	"reflect"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
)

func TestTaskEnv(t *testing.T) {
	resolved := &config.Resolved{Otel: config.Defaults(), JobDir: "/j"}
	resolved.Identity.RunID = "run-%j"
	ports := jobdir.Ports{OTLPGRPC: 4001, OTLPHTTP: 4002}
	env := TaskEnv(resolved, jobfacts.Facts{JobID: "12"}, ports, "abc")
	m := map[string]string{}
	for _, kv := range env {
		m[kv.Key] = kv.Value
	}
	want := map[string]string{
		"NEMO_GYM_OTEL_ENABLED": "1", "NEMO_GYM_OTEL_RUN_ID": "run-12", "NEMO_GYM_OTEL_SPAN_GROUPS": "default,verify",
		"NEMO_GYM_OTEL_LOGS_ENABLED": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4002",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20abc",
		"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://127.0.0.1:4001", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "grpc",
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %v\nwant %v", m, want)
	}
	resolved.Otel.GymTelemetry, resolved.Otel.GymLogs = false, false
	m = map[string]string{}
	for _, kv := range TaskEnv(resolved, jobfacts.Facts{JobID: "12"}, ports, "abc") {
		m[kv.Key] = kv.Value
	}
	if _, ok := m["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"]; ok || m["NEMO_GYM_OTEL_LOGS_ENABLED"] != "0" || m["NEMO_GYM_OTEL_ENABLED"] != "0" {
		t.Fatalf("gym_telemetry/gym_logs off: %v", m)
	}
}
