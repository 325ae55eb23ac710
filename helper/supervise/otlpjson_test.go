package supervise_test

// The assertions on the OTLP-JSON lines the file exporters write; the
// lines are read by internal/otlptest.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// identity is what every resource must carry.
type identity struct {
	user, jobID, node string
	overrides         map[string]bool // allowed service.name.override values
}

// checkIdentity reports every resource of d that lacks the identity.
func checkIdentity(t testing.TB, where string, d otlptest.Data, id identity) {
	t.Helper()
	if len(d.Resources) == 0 {
		t.Errorf("%s: no resources at all", where)
	}
	bad := 0
	for _, r := range d.Resources {
		var problems []string
		want := map[string]string{"user": id.user, "run_id": id.jobID, "slurm_job_id": id.jobID, "service.name": harness.ServiceName, "host.name": id.node}
		for k, v := range want {
			if got, ok := r.Str(k); !ok || got != v {
				problems = append(problems, fmt.Sprintf("%s=%q (string %v), want %q", k, got, ok, v))
			}
		}
		if o, ok := r.Str("service.name.override"); !ok || !id.overrides[o] {
			problems = append(problems, fmt.Sprintf("service.name.override=%q not one of %v", o, keys(id.overrides)))
		}
		if len(problems) > 0 {
			bad++
			if bad <= 3 {
				t.Errorf("%s: a resource lacks the identity: %s", where, strings.Join(problems, "; "))
			}
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d resources lack the identity in all", where, bad)
	}
}

// overridesSeen lists the service.name.override values of d's resources.
func overridesSeen(d otlptest.Data) map[string]bool {
	seen := map[string]bool{}
	for _, r := range d.Resources {
		if o, ok := r.Str("service.name.override"); ok {
			seen[o] = true
		}
	}
	return seen
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
