package render_test

import (
	"reflect"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

func TestJobOf(t *testing.T) {
	spec := &config.Resolved{}
	f := jobfacts.Facts{JobID: "9", User: "u", Node: "gn1", Cluster: "c1", GPUs: []string{"0"}}
	spec.Identity.RunID = "eval-%j"
	spec.Identity.Benchmark = "gsm8k"
	j := render.JobOf(spec, f)
	if j.RunID != "eval-9" || j.Cluster != "c1" || j.Benchmark != "gsm8k" || j.User != "u" || !reflect.DeepEqual(j.GPUs, []string{"0"}) {
		t.Errorf("%+v", j)
	}
	spec.Identity.Cluster = "site-name"
	if render.JobOf(spec, f).Cluster != "site-name" {
		t.Error("identity.cluster does not win over SLURM_CLUSTER_NAME")
	}
}
