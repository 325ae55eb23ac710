package render

import (
	"crypto/sha1"
	"fmt"
	"strconv"
)

// Lens' identity of a Slurm job: the resource attributes NeMo Lens derives
// from a process's Slurm environment (NVIDIA-NeMo/Lens
// src/nemo/lens/resources/slurm.py, derive_slurm_resource_attributes, and
// the names in src/nemo/lens/semconv/model/slurm.yaml and nv_dl.yaml, at
// 04914a2ae371803653772a9b069d2216fdbaa9bd). Gym's servers carry them on
// their own resources when Lens instruments them; the collector stamps the
// same keys, derived the same way, on every other resource (engine, GPU and
// node scrapes), so that one job's spans and metrics join on one key.
const (
	// LensJobID is slurm.job.id: <array job id>_<task id> for an array
	// element, else the job id (string).
	LensJobID = "slurm.job.id"
	// LensJobIDRaw is slurm.job.id.raw: the job id itself (string).
	LensJobIDRaw = "slurm.job.id.raw"
	// LensArrayJobID is slurm.array.job_id: the array job id, else the job
	// id (string).
	LensArrayJobID = "slurm.array.job_id"
	// LensArrayTaskID is slurm.array.task_id: the task id, else "0".
	LensArrayTaskID = "slurm.array.task_id"
	// LensRestartCount is slurm.restart_count: Slurm's restart count (Int,
	// 0 when Slurm did not say, as Lens defaults it).
	LensRestartCount = "slurm.restart_count"
	// LensSLUID is slurm.sluid: the run's Slurm-wide unique id, when known.
	LensSLUID = "slurm.sluid"
	// LensClusterName is slurm.cluster.name: SLURM_CLUSTER_NAME.
	LensClusterName = "slurm.cluster.name"
	// LensJobUser is slurm.job.user: the job's user.
	LensJobUser = "slurm.job.user"
	// LensHeadNode is slurm.head_node.name: the node the batch script
	// runs on (the first node of the job's node list). Lens derives it
	// only in the batch script (SLURMD_NODENAME where no SLURM_STEP_ID
	// is set); the collector stamps it on every resource of every node.
	LensHeadNode = "slurm.head_node.name"
	// LensJobUUID is nv.dl.job.uuid, the join key: a UUIDv5 (URL namespace)
	// of "nemo.lens.job/<cluster or nocluster>/<array job id, else job id>",
	// stable across requeues.
	LensJobUUID = "nv.dl.job.uuid"
	// LensRunUUID is nv.dl.run.uuid: a UUIDv5 of
	// "nemo.lens.run/<cluster>/<job key>/sr<restart count>" (no sr part for
	// an array element), new for every run of the job.
	LensRunUUID = "nv.dl.run.uuid"
)

// lensAttr is one Lens resource attribute: a string, or an Int when isInt.
type lensAttr struct {
	key, val string
	isInt    bool
}

// lensIdentity is Lens' identity of job j in Lens' order; empty values are
// left out, as Lens leaves them out.
func lensIdentity(j Job) []lensAttr {
	if j.JobID == "" {
		return nil
	}
	array := j.ArrayJobID != "" && j.ArrayTaskID != ""
	jobID, arrayJob, task, key := j.JobID, j.JobID, "0", j.JobID
	if array {
		jobID, arrayJob, task, key = j.ArrayJobID+"_"+j.ArrayTaskID, j.ArrayJobID, j.ArrayTaskID, j.ArrayJobID
	}
	restart := uint64(0)
	if n, err := strconv.ParseUint(j.RestartCount, 10, 16); err == nil {
		restart = n
	}
	cluster := j.SlurmCluster
	if cluster == "" {
		cluster = "nocluster"
	}
	run := "nemo.lens.run/" + cluster + "/" + key
	if !array {
		run += "/sr" + strconv.FormatUint(restart, 10)
	}
	out := []lensAttr{
		{key: LensJobID, val: jobID},
		{key: LensJobIDRaw, val: j.JobID},
		{key: LensArrayJobID, val: arrayJob},
		{key: LensArrayTaskID, val: task},
		{key: LensSLUID, val: j.SLUID},
		{key: LensClusterName, val: j.SlurmCluster},
		{key: LensHeadNode, val: j.HeadNode},
		{key: LensRestartCount, val: strconv.FormatUint(restart, 10), isInt: true},
		{key: LensJobUser, val: j.User},
		{key: LensJobUUID, val: LensUUID("nemo.lens.job/" + cluster + "/" + key)},
		{key: LensRunUUID, val: LensUUID(run)},
	}
	kept := out[:0]
	for _, a := range out {
		if a.val != "" {
			kept = append(kept, a)
		}
	}
	return kept
}

// LensAttrs is Lens' identity of job j (the keys above, in Lens' order,
// empty values left out): what the collector stamps on every resource
// where the producer has not set the key, and what every task's
// OTEL_RESOURCE_ATTRIBUTES gets (helper/taskenv), so that both carry the
// same values.
func LensAttrs(j Job) []Attr {
	var out []Attr
	for _, a := range lensIdentity(j) {
		out = append(out, Attr{Key: a.key, Value: a.val, Int: a.isInt})
	}
	return out
}

// urlNamespace is the RFC 4122 URL namespace (Python's uuid.NAMESPACE_URL).
var urlNamespace = [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// LensUUID is the RFC 4122 version 5 UUID of name in the URL namespace, in
// its canonical lower-case text form: Python's
// str(uuid.uuid5(uuid.NAMESPACE_URL, name)), which Lens uses for
// nv.dl.job.uuid and nv.dl.run.uuid.
func LensUUID(name string) string {
	h := sha1.New()
	h.Write(urlNamespace[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
