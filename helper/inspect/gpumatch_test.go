package inspect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// TestRecordedGPUs: the whole-GPU files of the real collector (the dcgm
// stand-in's gpu 1, pci_bus_id 00000000:19:00.0) with a state.json that
// records the job's GPU by device. Recorded as that bus id, the series is
// the job's and matched by pci_bus_id; recorded as another GPU (the
// collector kept a GPU by index order that is not the job's), the series
// is not the job's and the energy is refused, naming its pci_bus_id.
func TestRecordedGPUs(t *testing.T) {
	for _, c := range []struct {
		name, bus string
		job       bool
	}{{"same device", "00000000:19:00.0", true}, {"another device", "00000000:18:00.0", false}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join("testdata", "gpus", "whole", "otel")
			ents, err := os.ReadDir(src)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				b, err := os.ReadFile(filepath.Join(src, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			st := jobdir.State{Status: jobdir.StatusDrained, GPUs: []gpudev.Device{{Slurm: "0", By: gpudev.ByMinor, Minor: 0, PCIBusID: c.bus}}}
			if err := jobdir.WriteState(dir, st); err != nil {
				t.Fatal(err)
			}
			r, err := Build(dir)
			if err != nil {
				t.Fatal(err)
			}
			if c.job {
				if !r.Energy.Joules.Known() || len(r.GPUSharing) != 0 {
					t.Errorf("energy %+v, sharing %q: want the recorded GPU's figure", r.Energy, r.GPUSharing)
				}
				if m := r.EnergyMatching; m.By != aPCIBusID || m.Note != matchNoteByDevice {
					t.Errorf("matching %+v, want by pci_bus_id, every GPU by device", m)
				}
				return
			}
			if r.Energy.Joules.Known() || r.Energy.Why != WhyNotAttributable || len(r.GPUSharing) != 1 ||
				!strings.Contains(r.GPUSharing[0], `"00000000:19:00.0" is none of the GPUs the supervisor recorded`) {
				t.Errorf("energy %+v, sharing %q: want no figure, the unrecorded GPU named", r.Energy, r.GPUSharing)
			}
		})
	}
}
