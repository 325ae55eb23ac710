package render

import (
	"reflect"
	"strings"
	"testing"
)

// TestPlanGPUs: what the prolog's SLURM_JOB_GPUS and CUDA_VISIBLE_DEVICES
// name, as Slurm's gres code sets them (gpus.go), and what the collector
// then keeps.
func TestPlanGPUs(t *testing.T) {
	const u0, u1 = "GPU-5fd4c1a0-0000-4000-8000-000000000000", "GPU-5fd4c1a0-0000-4000-8000-000000000001"
	for _, c := range []struct {
		name             string
		indexes, devices []string
		want             gpuPlan
	}{
		{"nothing named", nil, nil, gpuPlan{}},
		// Slurm before 25.11, no MIG: CUDA_VISIBLE_DEVICES repeats the indexes.
		{"indexes", []string{"0", "2"}, []string{"0", "2"}, gpuPlan{named: true, indexes: []string{"0", "2"}}},
		{"indexes only", []string{"3"}, nil, gpuPlan{named: true, indexes: []string{"3"}}},
		{"devices only", nil, []string{"1"}, gpuPlan{named: true, indexes: []string{"1"}}},
		// Slurm 25.11+: whole GPUs by UUID; the indexes are not needed.
		{"gpu uuids", []string{"0", "1"}, []string{u0, u1}, gpuPlan{named: true, uuids: []string{u0, u1}}},
		// MIG, older drivers: parent UUID and GPU instance id.
		{"mig exact", []string{"4"}, []string{"MIG-" + u1 + "/3/0"}, gpuPlan{named: true, instances: []gpuInstance{{u1, "3"}}}},
		// MIG UUIDs: which instances cannot be told.
		{"mig uuids", []string{"4", "5"}, []string{"MIG-0c1d2e3f-0000-4000-8000-000000000001", "MIG-0c1d2e3f-0000-4000-8000-000000000002"},
			gpuPlan{named: true, anyMIG: true}},
		// A whole GPU named by index beside MIG devices: Slurm's index
		// counts MIG devices, so every whole GPU is kept as shared.
		{"mixed index", []string{"0", "7"}, []string{"MIG-0c1d2e3f-0000-4000-8000-000000000001", "7"},
			gpuPlan{named: true, anyMIG: true, anyWhole: true}},
		{"unknown form", []string{"0"}, []string{"nvidia0"}, gpuPlan{named: true, anyMIG: true, anyWhole: true}},
		{"quote", nil, []string{`GPU-"x`}, gpuPlan{named: true, anyMIG: true, anyWhole: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := planGPUs(c.indexes, c.devices, nil)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("planGPUs(%q, %q) = %+v, want %+v", c.indexes, c.devices, got, c.want)
			}
		})
	}
	// Keeping everything needs no filter; nothing named is marked unnamed.
	if f := planGPUs(nil, nil, nil).filter(); f != "" {
		t.Errorf("nothing named: filter %q", f)
	}
	if f := planGPUs(nil, []string{"nvidia0"}, nil).filter(); f != "" {
		t.Errorf("unknown form: filter %q, want none (everything kept, shared)", f)
	}
	if m := planGPUs(nil, nil, nil).marks(); len(m) != 1 || !strings.Contains(m[0], `"unnamed"`) {
		t.Errorf("nothing named: marks %q", m)
	}
}
