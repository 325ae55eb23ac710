package render

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
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
	// Named by PCI bus id (the supervisor's gpudev.Resolve): the filter and
	// the marks match dcgm-exporter's pci_bus_id in NVML's form or Linux's
	// ($ written $$, as every literal of the configuration).
	p := planGPUs([]string{"0"}, []string{"0"}, []gpudev.Device{{Slurm: "0", By: gpudev.ByMinor, PCIBusID: "00000000:19:00.0"},
		{Slurm: "MIG-GPU-x/2/0", By: gpudev.ByUUID, PCIBusID: "00000001:3B:00.0", Instance: "2"}})
	f := p.filter()
	for _, want := range []string{`IsMatch(attributes["pci_bus_id"], "(?i)^0*:19:00[.]0$$")`, `IsMatch(attributes["pci_bus_id"], "(?i)^0*1:3B:00[.]0$$") and attributes["GPU_I_ID"] == "2"`} {
		if !strings.Contains(f, want) {
			t.Errorf("by bus id: filter %q lacks %q", f, want)
		}
	}
	if m := strings.Join(p.marks(), "\n"); !strings.Contains(m, `"job") where`) || !strings.Contains(m, `"mig") where`) || strings.Contains(m, `attributes["gpu"] ==`) {
		t.Errorf("by bus id: marks %q", m)
	}
	for _, id := range []string{"00000000:19:00.0", "0000:19:00.0", "0:19:00.0"} {
		if !regexp.MustCompile("(?i)^0*:19:00[.]0$").MatchString(id) {
			t.Errorf("%s does not match", id)
		}
	}
}
