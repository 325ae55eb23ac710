package render

import (
	"fmt"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
)

// The attribute the collector stamps on every dcgm-exporter data point
// that names a GPU (attribute gpu), saying whether the GPU or GPU instance
// it describes is the job's alone. Its values:
const (
	// GPUAttributionAttribute is the data point attribute's name.
	GPUAttributionAttribute = "gpu_attribution"
	// GPUJob: a whole GPU Slurm allocated to the job (named by its UUID,
	// or by its index on a node where Slurm named no MIG device).
	GPUJob = "job"
	// GPUMIG: a MIG instance Slurm allocated to the job, named exactly
	// (parent GPU UUID and GPU instance id). Its device-level fields
	// (power, energy, temperature, clocks) are the parent GPU's, shared
	// with the other instances.
	GPUMIG = "mig"
	// GPUShared: kept although the prolog cannot tell it is the job's: a
	// MIG instance when Slurm named the job's instances by MIG UUID only
	// (every instance on the node is kept, other tenants' slices
	// included), or a whole GPU Slurm named by an index on a node with
	// MIG devices.
	GPUShared = "shared"
	// GPUUnnamed: Slurm named none of the job's GPUs on this node (no
	// SLURM_JOB_GPUS, no CUDA_VISIBLE_DEVICES): every GPU is kept.
	GPUUnnamed = "unnamed"
)

// What the prolog's environment names (Slurm's gres code,
// src/plugins/gres/common/gres_common.c, gres_common_prep_set_env):
// SLURM_JOB_GPUS holds Slurm's own gres indexes, and CUDA_VISIBLE_DEVICES
// holds, per allocated device, its unique id when it has one, else that
// same index. With gres.conf AutoDetect=nvml (src/plugins/gpu/nvml/
// gpu_nvml.c) a MIG device's unique id is its MIG UUID, "MIG-<uuid>"
// (driver 470.42.01 and later), or "MIG-GPU-<parent uuid>/<gi>/<ci>"
// (older drivers); from Slurm 25.11 a whole GPU's is its "GPU-<uuid>".
// On a node with MIG devices Slurm's indexes count MIG devices, so they
// do not name dcgm-exporter's gpu (the parent GPU's index). gpudev.NameForm
// tells the forms apart.

// gpuInstance is a MIG instance: its parent GPU's UUID and its GPU
// instance id (dcgm-exporter's UUID and GPU_I_ID labels).
type gpuInstance struct{ uuid, gi string }

// busDevice is a GPU named by its PCI bus id in NVML's form
// (dcgm-exporter's pci_bus_id), or a MIG instance of it (gi set).
type busDevice struct{ bus, gi string }

// gpuPlan is which dcgm-exporter series the collector keeps, and how it
// marks them.
type gpuPlan struct {
	// named is false when Slurm named nothing: no filter, every series
	// marked GPUUnnamed.
	named bool
	// indexes are dcgm-exporter gpu values of whole GPUs (only when no
	// device is a MIG device and none has a UUID).
	indexes []string
	// uuids are whole GPUs by UUID; instances MIG instances by parent
	// UUID and GPU instance id: GPUJob and GPUMIG.
	uuids     []string
	instances []gpuInstance
	// anyMIG keeps every MIG instance series (GPU_I_ID set) and anyWhole
	// every whole-GPU series, marked GPUShared: the devices Slurm named
	// could not be told apart.
	anyMIG, anyWhole bool
	// buses are the job's GPUs and MIG instances by PCI bus id (the
	// supervisor found every device Slurm named in the driver's files):
	// GPUJob and GPUMIG. When set, the fields above are not.
	buses []busDevice
}

// planGPUs reads the job's GPUs on the node: indexes from SLURM_JOB_GPUS,
// devices from CUDA_VISIBLE_DEVICES (both as the prolog saw them), and
// pci, the same devices named by PCI bus id (gpudev.Resolve), which wins
// when set.
func planGPUs(indexes, devices []string, pci []gpudev.Device) gpuPlan {
	if len(pci) > 0 {
		p := gpuPlan{named: true}
		for _, d := range pci {
			p.buses = append(p.buses, busDevice{d.PCIBusID, d.Instance})
		}
		return p
	}
	p := gpuPlan{named: len(indexes) > 0 || len(devices) > 0}
	numeric := false
	for _, d := range devices {
		switch form, parent, gi := gpudev.NameForm(d); form {
		case gpudev.FormGPUUUID:
			p.uuids = append(p.uuids, d)
		case gpudev.FormMIGOld:
			p.instances = append(p.instances, gpuInstance{parent, gi})
		case gpudev.FormMIGUUID:
			p.anyMIG = true
		case gpudev.FormIndex:
			numeric = true
		default: // a form not known: nothing of the node can be told apart
			p.anyMIG, p.anyWhole = true, true
		}
	}
	mig := p.anyMIG || len(p.instances) > 0
	switch {
	case numeric && (mig || len(p.uuids) > 0):
		// An index beside UUIDs: on a node with MIG devices Slurm's
		// indexes count them, so they name no GPU of dcgm-exporter's.
		p.anyWhole = true
	case !mig && len(p.uuids) == 0 && !p.anyWhole:
		p.indexes = indexes
		if len(p.indexes) == 0 {
			p.indexes = devices // all indexes here
		}
	}
	return p
}

const (
	dcgmPoint = `resource.attributes["service.name"] == "dcgm" and attributes["gpu"] != nil`
	uuidOf    = `(attributes["UUID"] == %[1]s or attributes["uuid"] == %[1]s)`
)

// terms are the OTTL conditions of the series the plan names, one per
// device: job those of whole GPUs (GPUJob), mig those of MIG instances
// (GPUMIG). For the filter (shared true) an index term also keeps the MIG
// instances of the GPU of that index; for the marks it does not (they stay
// GPUShared).
func (p gpuPlan) terms(shared bool) (job, mig []string) {
	for _, b := range p.buses {
		t := busTerm(b.bus)
		switch {
		case b.gi != "":
			mig = append(mig, t+fmt.Sprintf(` and attributes["GPU_I_ID"] == %s`, ottlString(b.gi)))
		case !shared:
			job = append(job, t+` and attributes["GPU_I_ID"] == nil`)
		default:
			job = append(job, t)
		}
	}
	for _, i := range p.indexes {
		t := fmt.Sprintf(`attributes["gpu"] == %s`, ottlString(i))
		if !shared {
			t += ` and attributes["GPU_I_ID"] == nil`
		}
		job = append(job, t)
	}
	for _, u := range p.uuids {
		job = append(job, fmt.Sprintf(uuidOf, ottlString(u)))
	}
	for _, x := range p.instances {
		mig = append(mig, fmt.Sprintf(uuidOf+` and attributes["GPU_I_ID"] == %s`, ottlString(x.uuid), ottlString(x.gi)))
	}
	return job, mig
}

// busTerm is the OTTL condition of the series of the GPU of PCI bus id
// bus (NVML's form, "00000000:18:00.0"): dcgm-exporter's pci_bus_id in
// NVML's form or Linux's ("0000:18:00.0"), either case.
func busTerm(bus string) string {
	dom, rest, _ := strings.Cut(bus, ":")
	dom = strings.TrimLeft(dom, "0")
	re := "(?i)^0*" + dom + ":" + strings.ReplaceAll(rest, ".", "[.]") + "$"
	return fmt.Sprintf(`attributes["pci_bus_id"] != nil and IsMatch(attributes["pci_bus_id"], %s)`, ottlString(re))
}

// filter is the filter/dcgm condition: true for the dcgm points of GPUs
// the plan does not keep. "" when it keeps everything.
func (p gpuPlan) filter() string {
	if !p.named || (p.anyMIG && p.anyWhole) {
		return ""
	}
	job, mig := p.terms(true)
	keep := append(job, mig...)
	if p.anyMIG {
		keep = append(keep, `attributes["GPU_I_ID"] != nil`)
	}
	if p.anyWhole {
		keep = append(keep, `attributes["GPU_I_ID"] == nil`)
	}
	cond := "false"
	if len(keep) > 0 {
		cond = "(" + strings.Join(keep, ") or (") + ")"
	}
	return fmt.Sprintf(`%s and not (%s)`, dcgmPoint, cond)
}

// marks are the transform/dcgm statements (datapoint context) stamping
// GPUAttributionAttribute on the dcgm points the filter kept.
func (p gpuPlan) marks() []string {
	set := func(v, where string) string {
		return fmt.Sprintf(`set(attributes[%q], %q) where %s`, GPUAttributionAttribute, v, where)
	}
	if !p.named {
		return []string{set(GPUUnnamed, dcgmPoint)}
	}
	st := []string{set(GPUShared, dcgmPoint)}
	job, mig := p.terms(false)
	if len(job) > 0 {
		st = append(st, set(GPUJob, dcgmPoint+" and (("+strings.Join(job, ") or (")+"))"))
	}
	if len(mig) > 0 {
		st = append(st, set(GPUMIG, dcgmPoint+" and (("+strings.Join(mig, ") or (")+"))"))
	}
	return st
}
