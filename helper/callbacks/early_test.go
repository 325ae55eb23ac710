package callbacks

import (
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
)

// TestEarlyCollector: the supervisor's process execs early only the
// product's host collector named by an absolute path.
func TestEarlyCollector(t *testing.T) {
	for _, c := range []struct {
		o    config.Otel
		want string
	}{
		{config.Otel{Binary: "/usr/bin/otelcol-gym"}, "/usr/bin/otelcol-gym"},
		{config.Otel{Binary: "/opt/site/bin/otelcol-gym"}, "/opt/site/bin/otelcol-gym"},
		{config.Otel{Binary: "otelcol-gym"}, ""},
		{config.Otel{Binary: "/usr/bin/otelcol-contrib"}, ""},
		{config.Otel{Binary: "/usr/bin/otelcol-gym", Container: "docker.io/otel/opentelemetry-collector:0.161.0"}, ""},
	} {
		if got := earlyCollector(c.o); got != c.want {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}
