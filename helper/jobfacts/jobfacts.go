// Package jobfacts holds what Slurm says about a job on one node and the
// names derived from it: the expanded job dir, the node's output dir and the
// identity stamped on the telemetry.
package jobfacts

import (
	"strconv"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// Facts are the job's facts on one node. In the plugin they come from the
// prolog's SPANK items and environment (S_JOB_ID, S_JOB_UID,
// SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, SLURMD_NODENAME,
// SLURM_JOB_NODELIST, SLURM_CLUSTER_NAME, SLURM_JOB_GPUS,
// CUDA_VISIBLE_DEVICES, SLURM_JOB_RESTART_COUNT, SLURM_JOB_SLUID).
type Facts struct {
	// JobID is the Slurm job id. A requeued or preempted job keeps it.
	JobID string `json:"job_id"`
	// RestartCount is how often Slurm restarted the job before this run
	// (SLURM_JOB_RESTART_COUNT: "0" for the first run, "1" after one
	// requeue); "" when Slurm did not say.
	RestartCount string `json:"restart_count,omitempty"`
	// SLUID is the Slurm-wide unique id of this run of the job
	// (SLURM_JOB_SLUID, Slurm 25.11 and later: a new one for every run);
	// "" on older releases.
	SLUID string `json:"sluid,omitempty"`
	// ArrayJobID and ArrayTaskID are set for array jobs ("" otherwise).
	ArrayJobID  string `json:"array_job_id,omitempty"`
	ArrayTaskID string `json:"array_task_id,omitempty"`
	// HeadNode is the node the batch script runs on: the first node of
	// SLURM_JOB_NODELIST ("" when the prolog was not given the list).
	HeadNode string `json:"head_node,omitempty"`
	// User is the job's user name.
	User string `json:"user"`
	// Node is this node's name.
	Node string `json:"node"`
	// NodeIndex is the node's position in the job's node list; 0 is the
	// first node, which writes <job dir>/otel itself.
	NodeIndex int `json:"node_index"`
	// Cluster is SLURM_CLUSTER_NAME.
	Cluster string `json:"cluster,omitempty"`
	// GPUs are the job's GPU indexes on this node (SLURM_JOB_GPUS); nil
	// when unknown.
	GPUs []string `json:"gpus,omitempty"`
	// GPUMinors maps each of GPUs to its device's minor number
	// (/dev/nvidia<minor>, the driver's Device Minor): the GRES index's
	// file in the node's gres.conf (slurm.ReadGresGPUs), its minor from
	// stat (slurm.DeviceMinor). nil when the prolog could not map them
	// (GPUMinorsNote says why): an index is then read as the minor.
	GPUMinors map[string]int `json:"gpu_minors,omitempty"`
	// GPUMinorsNote says how GPUMinors were found ("gres.conf <path>,
	// minors by stat") or why they were not; "" when the job has no
	// SLURM_JOB_GPUS on the node.
	GPUMinorsNote string `json:"gpu_minors_note,omitempty"`
	// GPUDevices are the job's GPU devices on this node as Slurm names
	// them in the prolog's CUDA_VISIBLE_DEVICES: MIG UUIDs for MIG
	// devices, GPU UUIDs (Slurm 25.11+) or indexes for whole GPUs
	// (render.Job.GPUDevices); nil when unset.
	GPUDevices []string `json:"gpu_devices,omitempty"`
	// GPUPCI are the job's GPUs (and MIG instances) on this node named by
	// device: each one's minor number and PCI bus id from the NVIDIA
	// driver's /proc/driver/nvidia/gpus/<bus>/information, matched to
	// GPUs and GPUDevices (gpudev.Resolve); nil when not resolved (no
	// driver, or a device Slurm named that the driver does not list).
	GPUPCI []gpudev.Device `json:"gpu_pci,omitempty"`
}

// ExpandJobDir expands %j (job id), %A (array master job id, else the job id),
// %a (array task id, else 0) and %% in a job_dir pattern, as sbatch --output
// does.
func ExpandJobDir(pattern string, f Facts) string {
	arrayJob, task := f.ArrayJobID, f.ArrayTaskID
	if arrayJob == "" {
		arrayJob = f.JobID
	}
	if task == "" {
		task = "0"
	}
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		if pattern[i] != '%' || i+1 == len(pattern) {
			b.WriteByte(pattern[i])
			continue
		}
		i++
		switch pattern[i] {
		case 'j':
			b.WriteString(f.JobID)
		case 'A':
			b.WriteString(arrayJob)
		case 'a':
			b.WriteString(task)
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(pattern[i])
		}
	}
	return b.String()
}

// OutputDir is where this node's collector writes: <job dir>/otel on the
// job's first node, <job dir>/otel/nodes/<node> on every other node. A
// link of a chain (resolved.ChainedFrom set: submitted from inside another
// --gym-otel job, as Gym's auto-resume does, sharing its job dir) writes
// under <job dir>/otel/links/<job id> instead, so that every link keeps
// its own files.
func OutputDir(resolved *config.Resolved, f Facts) string {
	link := ""
	if resolved.ChainedFrom != "" {
		link = f.JobID
	}
	return jobdir.OutputDir(ExpandJobDir(resolved.JobDir, f), link, f.NodeIndex, f.Node)
}

// RunID is the run identity: the settings' run_id (with %j/%A/%a expanded),
// else the job id.
func RunID(resolved *config.Resolved, f Facts) string {
	if resolved.Identity.RunID != "" {
		return ExpandJobDir(resolved.Identity.RunID, f)
	}
	return f.JobID
}

// ParseGPUs parses SLURM_JOB_GPUS ("0,1,3"); "" gives nil (unknown).
func ParseGPUs(s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	var out []string
	for _, g := range strings.Split(s, ",") {
		if g = strings.TrimSpace(g); g != "" {
			if _, err := strconv.Atoi(g); err == nil {
				out = append(out, g)
			}
		}
	}
	return out
}

// ParseGPUDevices splits CUDA_VISIBLE_DEVICES as Slurm sets it in the
// prolog ("MIG-0c1d...,MIG-77a2...", "GPU-5fd4...,GPU-9b1e..." or "0,1");
// "" gives nil (unset). Entries are trimmed, empty ones dropped and each cut
// to 128 bytes; their forms are read by render.
func ParseGPUDevices(s string) []string {
	var out []string
	for _, d := range strings.Split(s, ",") {
		if d = strings.TrimSpace(d); d != "" {
			if len(d) > 128 {
				d = d[:128]
			}
			out = append(out, d)
		}
	}
	return out
}
