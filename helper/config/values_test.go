package config

import (
	"encoding/base64"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/gymschema"
	"strings"
	"testing"
)

// TestForgedValuesRefusedByName: a spec set by hand (not made by Resolve)
// with values no user can write is refused by Validate, one error per
// value naming the key; a value past int64 is refused by Decode, naming
// the field.
func TestForgedValuesRefusedByName(t *testing.T) {
	good := func() *Resolved {
		r := &Resolved{Version: EncodedVersion, Otel: Defaults(), JobDir: "/j"}
		r.Otel.Endpoint, r.Otel.ServiceName = "https://otel.example", "s"
		return r
	}
	if _, err := good().Validate(nil); err != nil {
		t.Fatalf("a good spec: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(r *Resolved)
		want string
	}{
		{"memory 0", func(r *Resolved) { r.Otel.MemoryLimitMiB = 0 }, "otel.memory_limit_mib: 0 is out of range 32..65536"},
		{"memory negative", func(r *Resolved) { r.Otel.MemoryLimitMiB = -1 }, "otel.memory_limit_mib: -1 is out of range"},
		{"memory overflowing the bound", func(r *Resolved) { r.Otel.MemoryLimitMiB = 1 << 50 }, "otel.memory_limit_mib: 1125899906842624 is out of range 32..65536"},
		{"memory one too many", func(r *Resolved) { r.Otel.MemoryLimitMiB = 65537 }, "otel.memory_limit_mib: 65537 is out of range"},
		{"interval", func(r *Resolved) { r.Otel.ScrapeIntervalSeconds = 0 }, "otel.scrape_interval_seconds: 0 is out of range 1..3600"},
		{"health", func(r *Resolved) { r.Otel.HealthCheckTimeoutSeconds = 1 << 40 }, "otel.health_check_timeout_seconds:"},
		{"shutdown", func(r *Resolved) { r.Otel.ShutdownTimeoutSeconds = 61 }, "otel.shutdown_timeout_seconds: 61 is out of range 1..60"},
		{"export", func(r *Resolved) { r.Otel.ExportTimeoutSeconds = -5 }, "otel.export_timeout_seconds: -5"},
		{"gpu port", func(r *Resolved) { r.Otel.GPUMetricsPort = 70000 }, "otel.gpu_metrics_port: 70000 is out of range 1..65535"},
		{"node port", func(r *Resolved) { r.Otel.NodeMetricsPort = -1 }, "otel.node_metrics_port: -1"},
		{"on_failure", func(r *Resolved) { r.Otel.OnFailure = "explode" }, `otel.on_failure: expected one of continue, fail, got "explode"`},
		{"mode", func(r *Resolved) { r.Otel.OutputDirMode = "0777" }, `otel.output_dir_mode: mode "0777" lets group or others write`},
		{"mode form", func(r *Resolved) { r.Otel.OutputDirMode = "700" }, `otel.output_dir_mode: "700" is not in the form "0700"`},
		{"service port", func(r *Resolved) { r.Services = []gymschema.Service{{Name: "p", Type: "vllm", Port: 0}} }, "services.p.port: 0 is out of range 1..65535"},
		{"service type", func(r *Resolved) { r.Services = []gymschema.Service{{Name: "p", Type: "ray", Port: 8000}} }, `services.p.type: "ray"`},
		{"service node", func(r *Resolved) {
			r.Services = []gymschema.Service{{Name: "p", Type: "vllm", Port: 8000, Nodes: []int{-2}}}
		}, "services.p: node index -2 is negative"},
		{"chain", func(r *Resolved) { r.ChainedFrom = "../x" }, `chained_from: "../x" is not a Slurm job id`},
		{"config", func(r *Resolved) { r.GymConfig = "rel.yaml" }, `config: "rel.yaml" is not an absolute path`},
	} {
		r := good()
		c.edit(r)
		// Through the wire, as a node receives it.
		enc, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(enc)
		if err != nil {
			t.Fatalf("%s: decode: %v", c.name, err)
		}
		_, err = got.Validate(nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
	// Past int64: Decode names the field.
	raw := fmt.Sprintf(`{"v":%d,"otel":{"enabled":true,"memory_limit_mib":1e30},"identity":{},"job_dir":"/j"}`, EncodedVersion)
	if _, err := Decode(base64.RawURLEncoding.EncodeToString([]byte(raw))); err == nil || !strings.Contains(err.Error(), "memory_limit_mib") {
		t.Errorf("1e30: %v", err)
	}
}
