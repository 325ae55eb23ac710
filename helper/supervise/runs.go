package supervise

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
)

// keepPreviousRun keeps the files of an earlier run in the output dir out
// before this run writes its own. Several runs write one output dir: a
// requeued or preempted job keeps its job id (and so its default job dir),
// and a Gym resume chain is several job ids sharing one job dir. The jsonl
// files and collector.log are appended to (each resource carries
// slurm_job_id, slurm_job_restart_count and, on Slurm 25.11+,
// slurm_job_sluid); state.json and collector.yaml are per run, so when
// state.json names another run, it and collector.yaml are renamed to
// state.<run>.json and collector.<run>.yaml, where <run> is
// "<job id>.<restart count>" of that run (a numeric suffix when taken).
// A line in collector.log marks where this run starts. Errors are logged:
// they never stop the collector.
func keepPreviousRun(out string, f jobfacts.Facts, collectorLog string, log logrus.FieldLogger) {
	appendLog(collectorLog, fmt.Sprintf("gym-otel: run of job %s, restart count %s%s", f.JobID, orUnknown(f.RestartCount), sluidText(f.SLUID)))
	prev, err := jobdir.ReadState(out)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	// A state.json that is not a State (ErrFormat) is an unnamed previous run.
	if err != nil && !errors.Is(err, jobdir.ErrFormat) {
		log.Warnf("the previous run's %s: %v", jobdir.StateFile, err)
		return
	}
	if prev.JobID == f.JobID && prev.RestartCount == f.RestartCount && prev.SLUID == f.SLUID {
		return // this run's own (a restarted supervisor)
	}
	key := runKey(prev)
	for _, name := range [][2]string{{jobdir.StateFile, jobdir.KeptStateFile}, {jobdir.ConfigFile, jobdir.KeptConfigFile}} {
		src := filepath.Join(out, name[0])
		if _, err := os.Lstat(src); err != nil {
			continue
		}
		dst := freeName(out, name[1], key)
		if err := os.Rename(src, dst); err != nil {
			log.Warnf("keeping the previous run's %s: %v", name[0], err)
			continue
		}
		log.Infof("the previous run's %s is now %s", name[0], filepath.Base(dst))
	}
}

// runKey is "<job id>.<restart count>" of a run's state, from file-name
// characters only; "previous" when the state does not say.
func runKey(st jobdir.State) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_' || r == '-' {
				return r
			}
			return -1
		}, s)
	}
	id, rc := clean(st.JobID), clean(st.RestartCount)
	switch {
	case id == "":
		return "previous"
	case rc == "":
		return id
	}
	return id + "." + rc
}

// freeName is dir/fmt(key), or with -2, -3, ... after key when taken.
func freeName(dir, format, key string) string {
	for i := 1; ; i++ {
		k := key
		if i > 1 {
			k = fmt.Sprintf("%s-%d", key, i)
		}
		p := filepath.Join(dir, fmt.Sprintf(format, k))
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) || i > 1000 {
			return p
		}
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func sluidText(s string) string {
	if s == "" {
		return ""
	}
	return ", SLUID " + s
}
