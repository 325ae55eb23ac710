package render_test

import (
	"reflect"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

func TestJobOf(t *testing.T) {
	resolved := &config.Resolved{}
	f := jobfacts.Facts{JobID: "9", User: "u", Node: "gn1", Cluster: "c1", GPUs: []string{"0"}}
	resolved.Identity.RunID = "eval-%j"
	resolved.Identity.Benchmark = "gsm8k"
	j := render.JobOf(resolved, f)
	if j.RunID != "eval-9" || j.Cluster != "c1" || j.Benchmark != "gsm8k" || j.User != "u" || !reflect.DeepEqual(j.GPUs, []string{"0"}) {
		t.Errorf("%+v", j)
	}
	resolved.Identity.Cluster = "site-name"
	if render.JobOf(resolved, f).Cluster != "site-name" {
		t.Error("identity.cluster does not win over SLURM_CLUSTER_NAME")
	}
}
