package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/lifecycle"
)

// Environment variables of the supervisor (besides otel.token_env, PATH,
// HOME, USER and LOGNAME), set by the prolog.
const (
	EnvSpec   = "GYM_OTEL_SPEC"   // the encoded resolved spec
	EnvFacts  = "GYM_OTEL_FACTS"  // JSON of jobfacts.Facts
	EnvRecord = "GYM_OTEL_RECORD" // root's record file; gone = the job ended
)

// SupervisorPath is the PATH the supervisor gets.
const SupervisorPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// PrologInput is what the C front hands the prolog.
type PrologInput struct {
	Args Args
	// Spec and Token are SPANK_GYM_OTEL_SPEC and SPANK_GYM_OTEL_TOKEN.
	Spec, Token string
	JobID       uint32
	UID, GID    uint32
	// Getenv reads the prolog's environment (SLURMD_NODENAME,
	// SLURM_JOB_NODELIST, SLURM_ARRAY_*, SLURM_CLUSTER_NAME, SLURM_JOB_GPUS).
	Getenv func(string) string
}

// NodeName is this node's name: SLURMD_NODENAME, else the short host name.
func NodeName(getenv func(string) string) string {
	if n := getenv("SLURMD_NODENAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	if i := indexByte(h, '.'); i > 0 {
		h = h[:i]
	}
	return h
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// Prolog starts the job's supervisor on this node and writes root's record.
// It is only called when the job carries a spec. Whatever happens, it leaves
// a record (status=failed with the reason when it could not start a ready
// collector) unless the record dir itself cannot be made; the returned error
// is for the log only: the prolog always returns 0 to Slurm.
func Prolog(in PrologInput, log logrus.FieldLogger) error {
	node := NodeName(in.Getenv)
	dir, err := MakeJobRecordDir(in.Args.RecordDir, node, in.JobID)
	if err != nil {
		return err
	}
	SweepStale(in.Args.RecordDir, node, in.JobID, log)
	rec := &Record{Status: "failed", OnFailure: "continue", UID: in.UID}
	fail := func(err error) error {
		// A failed record carries no task env: nothing of what failed
		// (a value the record format cannot hold) is written again.
		rec.Status, rec.Env = "failed", nil
		rec.Reason = err.Error()
		if werr := WriteRecord(dir, rec); werr != nil {
			return errors.Join(err, werr)
		}
		return err
	}
	spec, err := config.Decode(in.Spec)
	if err != nil {
		return fail(err)
	}
	if spec.Otel.OnFailure == "fail" {
		rec.OnFailure = "fail"
	}
	// The node's own site file decides the keys it pins: a user value, or
	// a spec set by hand through libslurm, never chooses them here.
	pinned, err := config.EnforcePins(spec, in.Args.Site, in.Args.SiteItems)
	if err != nil {
		return fail(err)
	}
	for _, line := range pinned {
		log.Warnf("job %d: %s", in.JobID, line)
	}
	rec.Unset = unsetNames(spec.Otel.TokenEnv)
	if _, err := spec.Validate(nil); err != nil {
		return fail(fmt.Errorf("the job's spec does not validate on node %s: %w", node, err))
	}
	if in.Token == "" {
		return fail(fmt.Errorf("the job carries no token (GYM_OTEL_TOKEN): was %s set in the submitting shell?", spec.Otel.TokenEnv))
	}
	rec.FinalWait = FinalWait(spec.Otel)
	// The epilog's wait: the user's shutdown bound plus the span-metrics
	// flush, but never past the site's prolog_timeout (which admins keep
	// below PrologEpilogTimeout).
	rec.DrainTimeout = min(spec.Otel.ShutdownTimeoutSeconds+10, in.Args.PrologTimeout)

	u, err := user.LookupId(strconv.FormatUint(uint64(in.UID), 10))
	if err != nil {
		return fail(fmt.Errorf("the job's user (uid %d): %w", in.UID, err))
	}
	groups, err := supplementaryGroups(u)
	if err != nil {
		return fail(fmt.Errorf("the groups of %s: %w", u.Username, err))
	}
	facts, err := prologFacts(in, node, u.Username, log)
	if err != nil {
		return fail(err)
	}
	factsJSON, err := json.Marshal(facts)
	if err != nil {
		return fail(err)
	}
	timeout := time.Duration(min(spec.Otel.HealthCheckTimeoutSeconds+5, in.Args.PrologTimeout)) * time.Second
	// The supervisor gets the spec as this node decided it (pins applied).
	nodeSpec, err := spec.Encode()
	if err != nil {
		return fail(err)
	}
	env := []string{
		EnvSpec + "=" + nodeSpec,
		spec.Otel.TokenEnv + "=" + in.Token,
		EnvFacts + "=" + string(factsJSON),
		EnvRecord + "=" + filepath.Join(dir, RecordFile),
		"PATH=" + SupervisorPath,
		"HOME=" + u.HomeDir,
		"USER=" + u.Username,
		"LOGNAME=" + u.Username,
	}
	if err := MakeSampledHint(dir, in.UID, in.GID); err != nil {
		log.Warnf("job %d: the sampled hint (the batch step waits its full bound): %v", in.JobID, err)
	}
	group, err := jobGroup(in.Args, node, in.JobID, spec.Otel, log)
	if err != nil {
		return fail(err)
	}
	if group != nil {
		rec.Cgroup = group.Rel
		rec.CgroupMemory = group.MemoryLimitFile()
	}
	sup, err := startSupervisor(in.Args.CLI, env, in.UID, in.GID, groups, group)
	if err != nil {
		if group != nil {
			_ = group.Remove()
		}
		return fail(fmt.Errorf("starting %s supervise: %w", in.Args.CLI, err))
	}
	rep, err := sup.wait(timeout)
	if err == nil && rep.Status != lifecycle.StatusReady {
		err = fmt.Errorf("the collector failed to start: %s", rep.Error)
	}
	if err != nil {
		sup.kill()
		return fail(err)
	}
	ps, err := readProc(sup.pid)
	if err != nil {
		sup.kill()
		return fail(fmt.Errorf("the supervisor (pid %d) is gone after its report: %w", sup.pid, err))
	}
	rec.Status = "ready"
	rec.SupervisorPID = sup.pid
	rec.SupervisorStart = ps.StartTime
	rec.Env = TaskEnv(spec, facts, rep)
	if err := WriteRecord(dir, rec); err != nil {
		sup.kill()
		return fail(err)
	}
	log.Infof("job %d: collector ready on %s (supervisor pid %d, OTLP http 127.0.0.1:%d, output %s, %d ms)",
		in.JobID, node, sup.pid, rep.Ports.OTLPHTTP, rep.OutputDir, rep.ReadyMillis)
	return nil
}

// unsetNames are the variables the steps remove from the task env: the
// token variable and Slurm's copies of the forwarded token.
func unsetNames(tokenEnv string) []string {
	out := []string{}
	if identRE(tokenEnv) {
		out = append(out, tokenEnv)
	}
	return append(out, TokenCopies...)
}

func supplementaryGroups(u *user.User) ([]uint32, error) {
	ids, err := u.GroupIds()
	if err != nil {
		return nil, err
	}
	var out []uint32
	for _, s := range ids {
		g, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, err
		}
		out = append(out, uint32(g))
	}
	return out, nil
}

func prologFacts(in PrologInput, node, userName string, log logrus.FieldLogger) (jobfacts.Facts, error) {
	f := jobfacts.Facts{
		JobID:       strconv.FormatUint(uint64(in.JobID), 10),
		ArrayJobID:  in.Getenv("SLURM_ARRAY_JOB_ID"),
		ArrayTaskID: in.Getenv("SLURM_ARRAY_TASK_ID"),
		User:        userName,
		Node:        node,
		Cluster:     in.Getenv("SLURM_CLUSTER_NAME"),
		GPUs:        jobfacts.ParseGPUs(in.Getenv("SLURM_JOB_GPUS")),
	}
	if f.ArrayJobID == "" {
		// With PrologFlags=Alloc, 22.05's prolog env has no SLURM_ARRAY_*
		// (and the SPANK items are not available there): ask slurmctld.
		if aj, at, err := arrayOf(in.JobID); err != nil {
			log.Warnf("job %d: array ids: %v", in.JobID, err)
		} else {
			f.ArrayJobID, f.ArrayTaskID = aj, at
		}
	}
	nodelist := in.Getenv("SLURM_JOB_NODELIST")
	if nodelist == "" {
		nodelist = in.Getenv("SLURM_NODELIST")
	}
	if nodelist != "" {
		idx, err := NodeIndex(nodelist, node)
		if err != nil {
			return f, err
		}
		if idx < 0 {
			log.Warnf("job %d: node %s is not in SLURM_JOB_NODELIST=%s: writing as a non-first node", in.JobID, node, nodelist)
			idx = 1
		}
		f.NodeIndex = idx
	}
	return f, nil
}

// scontrolPaths are where scontrol is looked for (the prolog has no PATH).
var scontrolPaths = []string{"/usr/bin/scontrol", "/usr/local/bin/scontrol", "/opt/slurm/bin/scontrol"}

// arrayOf asks slurmctld for the job's array job and task ids ("" when the
// job is not an array task).
func arrayOf(jobID uint32) (arrayJob, task string, err error) {
	out, err := scontrolShowJob(jobID)
	if err != nil {
		return "", "", err
	}
	return parseArray(out, jobID)
}

// parseArray reads ArrayJobId= and ArrayTaskId= of job jobID from `scontrol
// -o show job` (for an array's first job id, scontrol prints one line per
// task of the array).
func parseArray(out string, jobID uint32) (arrayJob, task string, err error) {
	want := "JobId=" + strconv.FormatUint(uint64(jobID), 10)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != want {
			continue
		}
		for _, kv := range f {
			if v, ok := strings.CutPrefix(kv, "ArrayJobId="); ok {
				arrayJob = v
			} else if v, ok := strings.CutPrefix(kv, "ArrayTaskId="); ok {
				task = v
			}
		}
		break
	}
	if (arrayJob == "") != (task == "") {
		return "", "", fmt.Errorf("scontrol show job: ArrayJobId=%q ArrayTaskId=%q", arrayJob, task)
	}
	if _, err := strconv.Atoi(task); task != "" && err != nil {
		return "", "", fmt.Errorf("scontrol show job: ArrayTaskId=%q is not one task", task)
	}
	return arrayJob, task, nil
}
