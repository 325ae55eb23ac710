package taskenv

import (
	"reflect"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
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

// TestTaskEnvLensSLUID: LENS_SLURM_SLUID only where Slurm gave a SLUID.
func TestTaskEnvLensSLUID(t *testing.T) {
	resolved := &config.Resolved{Otel: config.Defaults(), JobDir: "/j"}
	for _, c := range []struct{ sluid, want string }{{"s9x", "s9x"}, {"", ""}} {
		got, n := "", 0
		for _, kv := range TaskEnv(resolved, jobfacts.Facts{JobID: "12", SLUID: c.sluid}, jobdir.Ports{OTLPGRPC: 1, OTLPHTTP: 2}, "t") {
			if kv.Key == LensSLUIDEnv {
				got, n = kv.Value, n+1
			}
		}
		if got != c.want || (c.want == "" && n != 0) {
			t.Errorf("SLUID %q: %s=%q (%d times)", c.sluid, LensSLUIDEnv, got, n)
		}
	}
}

// TestResourceAttrs: values percent-encoded as Lens' writer and Python's
// quote(safe="") encode them; keys the variable cannot carry left out.
func TestResourceAttrs(t *testing.T) {
	got := ResourceAttrs([]record.KV{
		{Key: "slurm.job.user", Value: "al ice,x=y%"},
		{Key: "slurm.head_node.name", Value: "gn-01.r~1_a"},
		{Key: "slurm.cluster.name", Value: "ü"},
		{Key: "bad,key", Value: "1"}, {Key: "bad=key", Value: "1"}, {Key: "", Value: "1"}, {Key: "bad key", Value: "1"},
	})
	want := []record.KV{
		{Key: "slurm.job.user", Value: "al%20ice%2Cx%3Dy%25"},
		{Key: "slurm.head_node.name", Value: "gn-01.r~1_a"},
		{Key: "slurm.cluster.name", Value: "%C3%BC"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}
