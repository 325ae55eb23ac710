// Package gpudev names the job's GPUs on a node by device: each one's
// device minor number and PCI bus id as the NVIDIA driver lists them
// under /proc/driver/nvidia/gpus/<PCI bus id>/information, matched to
// the devices Slurm named (SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES).
//
// dcgm-exporter labels every GPU series with pci_bus_id, the GPU's PCI
// bus id as DCGM reports it (NVIDIA/dcgm-exporter
// internal/pkg/rendermetrics/render_metrics.go, commit 1f7abdb:
// pci_bus_id="{{ $metric.GPUPCIBusID }}"), in NVML's form
// "00000000:3B:00.0" (8 hex digits of domain, upper case); the driver's
// information file names it "0000:3b:00.0" (NVIDIA/open-gpu-kernel-modules
// kernel-open/nvidia/nv-procfs.c, nv_procfs_read_gpu_info: "Bus Location:
// \t %04x:%02x:%02x.%x", "Device Minor: \t %u", "GPU UUID: \t %s").
// BusID reads either into NVML's form.
package gpudev

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// DefaultRoot is the NVIDIA driver's proc directory.
const DefaultRoot = "/proc/driver/nvidia"

// GPU is one GPU of the node as the driver lists it.
type GPU struct {
	// BusID is the PCI bus id in NVML's form (BusID).
	BusID string
	// Minor is the device minor number (/dev/nvidia<Minor>).
	Minor int
	// UUID is "GPU-<uuid>" ("" when the file has none).
	UUID string
}

var reBus = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})\.([0-7])$`)
})

// BusID reads a PCI bus id ("0000:3b:00.0" as Linux writes it, or
// "00000000:3B:00.0" as NVML does) into NVML's form, dcgm-exporter's
// pci_bus_id. ok is false when s is neither.
func BusID(s string) (id string, ok bool) {
	m := reBus().FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return "", false
	}
	n := func(h string) uint64 { v, _ := strconv.ParseUint(h, 16, 32); return v }
	return fmt.Sprintf("%08X:%02X:%02X.%d", n(m[1]), n(m[2]), n(m[3]), n(m[4])), true
}

// Read lists the GPUs of root/gpus/*/information (root: DefaultRoot, or a
// tree a test writes), in PCI bus order. Errors: root/gpus unreadable
// (os.IsNotExist: no NVIDIA driver loaded), or an information file
// without a readable Device Minor or Bus Location (naming the file).
func Read(root string) ([]GPU, error) {
	dirs, err := os.ReadDir(filepath.Join(root, "gpus"))
	if err != nil {
		return nil, err
	}
	var out []GPU
	for _, d := range dirs {
		path := filepath.Join(root, "gpus", d.Name(), "information")
		g, err := readInformation(path)
		if err != nil {
			return nil, err
		}
		if g.BusID == "" {
			// Older drivers write no Bus Location: the directory's name
			// is the bus id.
			if id, ok := BusID(d.Name()); ok {
				g.BusID = id
			}
		}
		if g.BusID == "" {
			return nil, fmt.Errorf("%s: no Bus Location", path)
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BusID < out[j].BusID })
	return out, nil
}

// readInformation reads one information file: "Key: \t value" lines
// (Device Minor, GPU UUID, Bus Location).
func readInformation(path string) (GPU, error) {
	g := GPU{Minor: -1}
	f, err := os.Open(path)
	if err != nil {
		return g, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Device Minor":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return g, fmt.Errorf("%s: Device Minor %q is not a number", path, v)
			}
			g.Minor = n
		case "GPU UUID":
			g.UUID = v
		case "Bus Location":
			id, ok := BusID(v)
			if !ok {
				return g, fmt.Errorf("%s: Bus Location %q is not a PCI bus id", path, v)
			}
			g.BusID = id
		}
	}
	if err := sc.Err(); err != nil {
		return g, fmt.Errorf("%s: %w", path, err)
	}
	if g.Minor < 0 {
		return g, fmt.Errorf("%s: no Device Minor", path)
	}
	return g, nil
}

// Device is one of the job's GPUs (or MIG instances) on the node, named
// by device.
type Device struct {
	// Slurm is the entry Slurm named it by: a CUDA_VISIBLE_DEVICES entry
	// ("GPU-<uuid>", "MIG-GPU-<uuid>/<gi>/<ci>") or a SLURM_JOB_GPUS
	// index.
	Slurm string `json:"slurm"`
	// By says how it was found: ByUUID or ByMinor.
	By string `json:"by"`
	// Minor is the GPU's device minor number (/dev/nvidia<Minor>);
	// PCIBusID its PCI bus id in NVML's form (dcgm-exporter's
	// pci_bus_id); UUID its GPU UUID ("" when the driver gave none).
	Minor    int    `json:"minor"`
	PCIBusID string `json:"pci_bus_id"`
	UUID     string `json:"uuid,omitempty"`
	// Instance is a MIG instance's GPU instance id (dcgm-exporter's
	// GPU_I_ID), "" for a whole GPU.
	Instance string `json:"gpu_instance,omitempty"`
}

// How a Device was found.
const (
	// ByUUID: CUDA_VISIBLE_DEVICES named the GPU (or a MIG instance's
	// parent) by UUID, the driver's GPU UUID.
	ByUUID = "UUID"
	// ByMinor: SLURM_JOB_GPUS named Slurm's GRES index, read as the
	// driver's Device Minor itself: right only where the node's gres.conf
	// lists File=/dev/nvidia0.. from 0 in order (the prolog could not map
	// the index through gres.conf: AutoDetect, or a gres.conf it could
	// not read).
	ByMinor = "minor"
	// ByGres: SLURM_JOB_GPUS named Slurm's GRES index (the GPU's place in
	// the node's GRES list), mapped through the node's gres.conf to its
	// device file's minor number, the driver's Device Minor.
	ByGres = "gres.conf"
)

// Form is how Slurm named one device in CUDA_VISIBLE_DEVICES: with gres.conf
// AutoDetect=nvml (src/plugins/gpu/nvml/gpu_nvml.c) a device's unique id
// when it has one, else its index. A MIG device's unique id is its MIG
// UUID, "MIG-<uuid>" (driver 470.42.01 and later), or
// "MIG-GPU-<parent uuid>/<gi>/<ci>" (older drivers); from Slurm 25.11 a
// whole GPU's is its "GPU-<uuid>".
type Form int

// The forms of a device's name (NameForm).
const (
	FormUnknown Form = iota // none of the others
	FormGPUUUID             // "GPU-<uuid>": a whole GPU
	FormMIGOld              // "MIG-GPU-<parent uuid>/<gi>/<ci>"
	FormMIGUUID             // "MIG-<uuid>"
	FormIndex               // a number of 1 to 4 digits
)

var (
	reGPUUUID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^GPU-[0-9A-Fa-f-]{8,64}$`) })
	reMIGOld  = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^MIG-(GPU-[0-9A-Fa-f-]{8,64})/([0-9]{1,4})/([0-9]{1,4})$`)
	})
	reMIGUUID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^MIG-[0-9A-Fa-f-]{8,64}$`) })
	reIndex   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]{1,4}$`) })
)

// NameForm reads the name d Slurm gave a device: its form and, for
// FormMIGOld, the parent GPU's UUID ("GPU-<uuid>") and the GPU instance
// id (dcgm-exporter's GPU_I_ID); both "" for the other forms.
func NameForm(d string) (f Form, parent, gi string) {
	switch {
	case reGPUUUID().MatchString(d):
		return FormGPUUUID, "", ""
	case reMIGOld().MatchString(d):
		m := reMIGOld().FindStringSubmatch(d)
		return FormMIGOld, m[1], m[2]
	case reMIGUUID().MatchString(d):
		return FormMIGUUID, "", ""
	case reIndex().MatchString(d):
		return FormIndex, "", ""
	}
	return FormUnknown, "", ""
}

// Resolve names the job's devices (indexes: SLURM_JOB_GPUS; devices:
// CUDA_VISIBLE_DEVICES, both as the prolog saw them) by the node's gpus.
// A GPU UUID or an old-form MIG name ("MIG-GPU-<uuid>/<gi>/<ci>") is
// found by the driver's GPU UUID; an index by the Device Minor (minors:
// each index's device minor from gres.conf, ByGres; nil reads the index
// as the minor, ByMinor), and only
// when Slurm named no device by UUID or as a MIG device (on a node with
// MIG devices Slurm's indexes count MIG devices, not GPUs). unresolved
// lists, with the reason, every named device that was not found: then
// the devices are not all known.
func Resolve(gpus []GPU, indexes, devices []string, minors map[string]int) (out []Device, unresolved []string) {
	byUUID := map[string]GPU{}
	byMinor := map[int]GPU{}
	for _, g := range gpus {
		if g.UUID != "" {
			byUUID[strings.ToLower(g.UUID)] = g
		}
		byMinor[g.Minor] = g
	}
	named := false // a device named by UUID or as a MIG device
	for _, d := range devices {
		switch form, parent, gi := NameForm(d); form {
		case FormGPUUUID:
			named = true
			if g, ok := byUUID[strings.ToLower(d)]; ok {
				out = append(out, Device{Slurm: d, By: ByUUID, Minor: g.Minor, PCIBusID: g.BusID, UUID: g.UUID})
			} else {
				unresolved = append(unresolved, d+": no GPU of the driver has this UUID")
			}
		case FormMIGOld:
			named = true
			if g, ok := byUUID[strings.ToLower(parent)]; ok {
				out = append(out, Device{Slurm: d, By: ByUUID, Minor: g.Minor, PCIBusID: g.BusID, UUID: g.UUID, Instance: gi})
			} else {
				unresolved = append(unresolved, d+": no GPU of the driver has its parent's UUID")
			}
		case FormIndex:
		default: // FormMIGUUID, FormUnknown
			named = true
			unresolved = append(unresolved, d+": a MIG UUID (or a form not known) names no GPU the driver lists")
		}
	}
	if named {
		return out, unresolved
	}
	if len(indexes) == 0 {
		indexes = devices // indexes only, or nothing
	}
	for _, i := range indexes {
		n, err := strconv.Atoi(i)
		if err != nil {
			unresolved = append(unresolved, i+": not an index")
			continue
		}
		by := ByMinor
		if minors != nil {
			m, ok := minors[i]
			if !ok {
				unresolved = append(unresolved, i+": no minor from gres.conf")
				continue
			}
			n, by = m, ByGres
		}
		if g, ok := byMinor[n]; ok {
			out = append(out, Device{Slurm: i, By: by, Minor: g.Minor, PCIBusID: g.BusID, UUID: g.UUID})
		} else {
			unresolved = append(unresolved, fmt.Sprintf("%s: no GPU of the driver has Device Minor %d", i, n))
		}
	}
	return out, unresolved
}
