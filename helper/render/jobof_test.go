package render

import (
	"reflect"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
)

// TestJobOfPassesGPUs: the node's GPU indexes and device ids reach the Job
// the dcgm filter is rendered from.
func TestJobOfPassesGPUs(t *testing.T) {
	j := JobOf(&config.Resolved{}, jobfacts.Facts{GPUs: []string{"4"}, GPUDevices: []string{"MIG-x"}})
	if !reflect.DeepEqual(j.GPUs, []string{"4"}) || !reflect.DeepEqual(j.GPUDevices, []string{"MIG-x"}) {
		t.Errorf("JobOf: GPUs %v devices %v", j.GPUs, j.GPUDevices)
	}
}
