package gpudev_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// A node whose device minors are not in PCI bus order (NVML's and DCGM's
// order): minor 0 is the GPU on bus 0x19, minor 1 the one on bus 0x18.
func node(t *testing.T) string {
	root := t.TempDir()
	testenv.NvidiaGPU(t, root, "0000:19:00.0", 0, "GPU-5fd4c1a0-0000-4000-8000-000000000001")
	testenv.NvidiaGPU(t, root, "0000:18:00.0", 1, "GPU-5fd4c1a0-0000-4000-8000-000000000000")
	return root
}

func TestRead(t *testing.T) {
	gpus, err := gpudev.Read(node(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []gpudev.GPU{
		{BusID: "00000000:18:00.0", Minor: 1, UUID: "GPU-5fd4c1a0-0000-4000-8000-000000000000"},
		{BusID: "00000000:19:00.0", Minor: 0, UUID: "GPU-5fd4c1a0-0000-4000-8000-000000000001"},
	}
	if !reflect.DeepEqual(gpus, want) {
		t.Fatalf("Read = %+v, want %+v", gpus, want)
	}
	if _, err := gpudev.Read(filepath.Join(t.TempDir(), "none")); !os.IsNotExist(err) {
		t.Errorf("no driver: err %v, want not-exist", err)
	}
	bad := t.TempDir()
	testenv.NvidiaGPU(t, bad, "0000:18:00.0", 0, "GPU-x")
	p := filepath.Join(bad, "gpus", "0000:18:00.0", "information")
	os.Chmod(p, 0o644)
	os.WriteFile(p, []byte("Bus Location: \t 0000:18:00.0\nDevice Minor: \t zero\n"), 0o644)
	if _, err := gpudev.Read(bad); err == nil || !strings.Contains(err.Error(), `Device Minor "zero"`) || !strings.Contains(err.Error(), p) {
		t.Errorf("a bad minor: err %v, want one naming the file and the value", err)
	}
}

func TestBusID(t *testing.T) {
	for in, want := range map[string]string{
		"0000:3b:00.0": "00000000:3B:00.0", "00000000:3B:00.0": "00000000:3B:00.0", "0001:c1:1f.7": "00000001:C1:1F.7",
		"3b:00.0": "", "0000:3b:00": "", "GPU-1": "",
	} {
		got, ok := gpudev.BusID(in)
		if got != want || ok != (want != "") {
			t.Errorf("BusID(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestResolve(t *testing.T) {
	gpus, err := gpudev.Read(node(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name             string
		indexes, devices []string
		minors           map[string]int
		want             []gpudev.Device
		unresolved       int
	}{
		// Without gres.conf's map Slurm's index 0 is read as the GRES
		// file /dev/nvidia0: minor 0, the GPU on bus 0x19 (DCGM's gpu 1),
		// not DCGM's gpu 0.
		{"index", []string{"0"}, []string{"0"}, nil, []gpudev.Device{{Slurm: "0", By: gpudev.ByMinor, Minor: 0, PCIBusID: "00000000:19:00.0", UUID: "GPU-5fd4c1a0-0000-4000-8000-000000000001"}}, 0},
		{"index only", []string{"1"}, nil, nil, []gpudev.Device{{Slurm: "1", By: gpudev.ByMinor, Minor: 1, PCIBusID: "00000000:18:00.0", UUID: "GPU-5fd4c1a0-0000-4000-8000-000000000000"}}, 0},
		{"uuid", []string{"0"}, []string{"GPU-5fd4c1a0-0000-4000-8000-000000000000"}, map[string]int{"0": 0}, []gpudev.Device{{Slurm: "GPU-5fd4c1a0-0000-4000-8000-000000000000", By: gpudev.ByUUID, Minor: 1, PCIBusID: "00000000:18:00.0", UUID: "GPU-5fd4c1a0-0000-4000-8000-000000000000"}}, 0},
		{"mig old form", []string{"3"}, []string{"MIG-GPU-5fd4c1a0-0000-4000-8000-000000000001/2/0"}, nil, []gpudev.Device{{Slurm: "MIG-GPU-5fd4c1a0-0000-4000-8000-000000000001/2/0", By: gpudev.ByUUID, Minor: 0, PCIBusID: "00000000:19:00.0", UUID: "GPU-5fd4c1a0-0000-4000-8000-000000000001", Instance: "2"}}, 0},
		// A MIG UUID names no GPU the driver lists; the index beside it
		// counts MIG devices and is not read as a minor.
		{"mig uuid", []string{"2"}, []string{"MIG-0c1d2e3f-0000-4000-8000-000000000001"}, nil, nil, 1},
		{"minor not there", []string{"7"}, []string{"7"}, nil, nil, 1},
		// gres.conf's map: index 0 is the node's first GPU file, of
		// minor 1 (bus 0x18), index 1 its second, of minor 0.
		{"gres.conf", []string{"0", "1"}, []string{"0", "1"}, map[string]int{"0": 1, "1": 0}, []gpudev.Device{
			{Slurm: "0", By: gpudev.ByGres, Minor: 1, PCIBusID: "00000000:18:00.0", UUID: "GPU-5fd4c1a0-0000-4000-8000-000000000000"},
			{Slurm: "1", By: gpudev.ByGres, Minor: 0, PCIBusID: "00000000:19:00.0", UUID: "GPU-5fd4c1a0-0000-4000-8000-000000000001"}}, 0},
		{"gres.conf minor not there", []string{"0"}, nil, map[string]int{"0": 7}, nil, 1},
		{"index not in gres.conf's map", []string{"1"}, nil, map[string]int{"0": 1}, nil, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, un := gpudev.Resolve(gpus, c.indexes, c.devices, c.minors)
			if !reflect.DeepEqual(got, c.want) || len(un) != c.unresolved {
				t.Fatalf("Resolve = %+v, unresolved %q; want %+v, %d unresolved", got, un, c.want, c.unresolved)
			}
		})
	}
}

// TestNameForm: each form of a device name Slurm writes in
// CUDA_VISIBLE_DEVICES, and the old MIG form's parent and GPU instance.
func TestNameForm(t *testing.T) {
	for _, c := range []struct {
		d          string
		form       gpudev.Form
		parent, gi string
	}{
		{"GPU-6f2b8c1e-0d4a-4c55-9a2e-1b3c4d5e6f70", gpudev.FormGPUUUID, "", ""},
		{"MIG-GPU-6f2b8c1e-0d4a-4c55-9a2e-1b3c4d5e6f70/3/0", gpudev.FormMIGOld, "GPU-6f2b8c1e-0d4a-4c55-9a2e-1b3c4d5e6f70", "3"},
		{"MIG-9a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d", gpudev.FormMIGUUID, "", ""},
		{"0", gpudev.FormIndex, "", ""},
		{"1234", gpudev.FormIndex, "", ""},
		{"12345", gpudev.FormUnknown, "", ""},
		{"GPU-xyz", gpudev.FormUnknown, "", ""},
		{"MIG-GPU-6f2b8c1e-0d4a-4c55-9a2e-1b3c4d5e6f70/3", gpudev.FormUnknown, "", ""},
		{"", gpudev.FormUnknown, "", ""},
	} {
		form, parent, gi := gpudev.NameForm(c.d)
		if form != c.form || parent != c.parent || gi != c.gi {
			t.Errorf("NameForm(%q) = %v %q %q, want %v %q %q", c.d, form, parent, gi, c.form, c.parent, c.gi)
		}
	}
}
