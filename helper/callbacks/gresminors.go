package callbacks

import (
	"fmt"
	"strconv"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// gresMinors maps the job's GRES indexes on the node (SLURM_JOB_GPUS:
// each GPU's place in the node's GRES list, not its device's number) to
// their devices' minor numbers through the node's gres.conf, beside the
// slurm.conf at slurmConf: index i is the i-th GPU file of the node
// (slurm.ReadGresGPUs), its minor from stat of the device, else from the
// file's trailing number (slurm.DeviceMinor). minors is nil when they
// cannot be mapped (no slurm.conf path, gres.conf unreadable, AutoDetect,
// an index past the node's files): the note says why, and the prolog
// logs it once; the supervisor then reads an index as the minor. Nothing
// here fails the job.
func gresMinors(slurmConf, node string, indexes []string, jobID uint32, log logrus.FieldLogger) (minors map[string]int, note string) {
	if len(indexes) == 0 {
		return nil, ""
	}
	const fallback = "GRES indexes read as device minors"
	unmapped := func(why string) (map[string]int, string) {
		note := fmt.Sprintf("%s: %s", fallback, why)
		log.Warnf("job %d: the job's GPUs on %s: %s", jobID, node, note)
		return nil, note
	}
	path := slurm.GresConfPath(slurmConf)
	if path == "" {
		return unmapped("no SLURM_CONF, so no gres.conf")
	}
	g, err := slurm.ReadGresGPUs(path, node)
	if err != nil {
		return unmapped(err.Error())
	}
	minors = map[string]int{}
	bys := map[string]bool{}
	for _, i := range indexes {
		n, err := strconv.Atoi(i)
		if err != nil || n < 0 || n >= len(g.Files) {
			return unmapped(fmt.Sprintf("%s: index %s is not one of the node's %d GPU files", path, i, len(g.Files)))
		}
		m, by, ok := slurm.DeviceMinor(g.Files[n])
		if !ok {
			return unmapped(fmt.Sprintf("%s: %s is no device and its name ends in no number", path, g.Files[n]))
		}
		minors[i] = m
		bys[by] = true
	}
	how := "minors by stat of the devices"
	switch {
	case bys[slurm.MinorByName] && bys[slurm.MinorByStat]:
		how = "minors by stat, else by the file's trailing number (not a device)"
	case bys[slurm.MinorByName]:
		how = "minors by the files' trailing numbers (not devices)"
	}
	return minors, fmt.Sprintf("gres.conf %s, %s", path, how)
}
