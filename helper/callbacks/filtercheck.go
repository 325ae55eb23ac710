package callbacks

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"github.com/sirupsen/logrus"
)

// SubmitFilterFile is the job_submit/lua script's name: Slurm reads it from
// the directory of slurm.conf on the controller (22.05 to 26.05).
const SubmitFilterFile = "job_submit.lua"

// submitFilterMarker is what the cap reads of a job (the job_desc field of
// the job-control variables); a job_submit.lua without it does not cap them.
const submitFilterMarker = "spank_job_env"

// submitFilterProblem says what this node can tell about the controller's
// cap on job-control variables (packaging/job_submit/gym-otel-cap.lua), from
// the slurm.conf at confPath (the prolog's SLURM_CONF; Include files are not
// followed), "" when nothing is wrong or nothing can be told:
//   - no `lua` in JobSubmitPlugins: no cap at all;
//   - job_submit.lua beside slurm.conf readable here (a shared or the same
//     /etc/slurm) without `spank_job_env`: not the cap;
//   - job_submit.lua not readable here (the controller's own disk, or a
//     configless node's cache): nothing more can be told.
//
// Both files are read bounded (1 MiB; slurm.conf by slurm.ReadConf).
func submitFilterProblem(confPath string) string {
	if confPath == "" {
		return ""
	}
	c, err := slurm.ReadConf(confPath)
	if err != nil {
		return ""
	}
	plugins, found := c.Get("JobSubmitPlugins")
	lua := false
	for _, p := range strings.Split(plugins, ",") {
		if p = strings.TrimSpace(strings.ToLower(p)); p == "lua" || p == "job_submit/lua" {
			lua = true
		}
	}
	if !lua {
		what := "no JobSubmitPlugins"
		if found {
			what = fmt.Sprintf("JobSubmitPlugins=%s (no lua)", plugins)
		}
		return fmt.Sprintf("%s has %s: a job-control variable over 128 KiB, which any user can set through libslurm, makes the job prolog's exec fail and drains the node; install the cap (packaging/job_submit/gym-otel-cap.lua, see the admin guide)", confPath, what)
	}
	script := filepath.Join(filepath.Dir(confPath), SubmitFilterFile)
	data, err := readBounded(script, 1<<20)
	if err != nil {
		return "" // the controller's file: not visible from this node
	}
	if !strings.Contains(data, submitFilterMarker) {
		return fmt.Sprintf("%s does not read %s: it does not cap job-control variables (merge the function of packaging/job_submit/gym-otel-cap.lua into it)", script, submitFilterMarker)
	}
	return ""
}

// warnSubmitFilter logs submitFilterProblem once per node and problem (a
// root marker in the node's record dir, as warnTimeouts).
func warnSubmitFilter(recordDir, node, confPath string, log logrus.FieldLogger) {
	p := submitFilterProblem(confPath)
	if p == "" {
		return
	}
	warnOnce(recordDir, node, ".submit-filter-warned", p, func() { log.Warnf("%s", p) })
}
