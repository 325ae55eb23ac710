package inspect

import (
	"fmt"

	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// The job's GPUs by device: the supervisor records in each node dir's
// state.json (gpus) the minor number and PCI bus id of every GPU (and MIG
// instance) Slurm gave the job on the node, read from the NVIDIA driver's
// /proc/driver/nvidia/gpus/<bus>/information (helper/gpudev). A
// dcgm-exporter series is matched to them by its pci_bus_id label
// (NVIDIA/dcgm-exporter internal/pkg/rendermetrics/render_metrics.go,
// commit 1f7abdb) and, for a MIG instance, GPU_I_ID: not by index order,
// so a node whose minors are not in PCI bus order, or whose Slurm orders
// MIG and whole GPUs apart from NVML, cannot mismatch.

// aPCIBusID is dcgm-exporter's label of a GPU's PCI bus id.
const aPCIBusID = "pci_bus_id"

// recordedGPUs is, per node name, the job's GPUs state.json recorded
// (read once; nodes without a record are absent).
func (a *aggregator) recordedGPUs() map[string][]gpudev.Device {
	if a.recorded != nil {
		return a.recorded
	}
	a.recorded = map[string][]gpudev.Device{}
	for _, d := range a.dirs {
		if d.node == "" {
			continue
		}
		if st, err := jobdir.ReadState(d.src.Dir); err == nil && len(st.GPUs) > 0 {
			a.recorded[d.node] = st.GPUs
		}
	}
	return a.recorded
}

// recordedDevice is the device of devs a dcgm series (labels l) is: same
// PCI bus id and GPU instance (nil when none is).
func recordedDevice(devs []gpudev.Device, l map[string]string) *gpudev.Device {
	bus, ok := gpudev.BusID(l[aPCIBusID])
	if !ok {
		return nil
	}
	for i, d := range devs {
		if d.PCIBusID == bus && d.Instance == l[aGPUInstance] {
			return &devs[i]
		}
	}
	return nil
}

// deviceID names a recorded device in the figures.
func deviceID(d gpudev.Device) string {
	s := fmt.Sprintf("%s %s (minor %d)", aPCIBusID, d.PCIBusID, d.Minor)
	if d.Instance != "" {
		s += " instance " + d.Instance
	}
	return s
}

// seriesWhy says why a dcgm series of node is not the job's alone ("" when
// it is), its id and the label it is named by: by device where the node's
// state.json recorded the job's GPUs (a whole GPU recorded is the job's;
// a MIG instance's power stays the parent's; a series of a GPU not
// recorded is not the job's), else as the collector marked it
// (gpu_attribution).
func (a *aggregator) seriesWhy(node string, l map[string]string) (why, id, by string) {
	devs := a.recordedGPUs()[node]
	if devs == nil {
		id, by = gpuID(l)
		return attributionWhy(l), id, by
	}
	d := recordedDevice(devs, l)
	if d == nil {
		id, by = gpuID(l)
		return fmt.Sprintf("not the job's: %s %q is none of the GPUs the supervisor recorded for the job (state.json gpus)", aPCIBusID, l[aPCIBusID]), id, by
	}
	why = ""
	if d.Instance != "" {
		why = attributionWhy(map[string]string{aAttribution: "mig", aGPUInstance: d.Instance})
	}
	return why, deviceID(*d), aPCIBusID
}
