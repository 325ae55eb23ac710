package callbacks

import (
	"fmt"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
	"github.com/sirupsen/logrus"
)

// The job prolog and epilog each run within one total deadline, computed
// once when they start (timing.Policy), that covers every step they take
// (stale-record sweep, Slurm queries, the wait for the supervisor's report,
// killing a failed start, writing the record; in the epilog the drain and
// the final kill). A prolog or epilog that Slurm kills at its own timeout
// drains the node, so the deadline is the plugstack's prolog_timeout, and
// never more than Slurm's timeout for the script less timing.SlurmMargin.

// warnTimeouts tells the admin, once per node and setting, when the
// plugstack's prolog_timeout is not below Slurm's own bound (the plugin then
// uses Slurm's bound less timing.SlurmMargin). The marker lives in root's record
// dir for the node.
func warnTimeouts(recordDir, node string, prologTimeout int, st slurm.Timeouts, log logrus.FieldLogger) {
	bound := st.Prolog
	if st.Epilog > 0 && (bound == 0 || st.Epilog < bound) {
		bound = st.Epilog
	}
	if bound == 0 || time.Duration(prologTimeout)*time.Second < bound-timing.SlurmMargin {
		return
	}
	warnOnce(recordDir, node, ".timeouts-warned", fmt.Sprintf("prolog_timeout=%d slurm=%s", prologTimeout, bound), func() {
		log.Warnf("plugstack prolog_timeout=%d is not below Slurm's prolog/epilog timeout (%s) less %s: the plugin uses %s; set prolog_timeout lower, or raise PrologEpilogTimeout (PrologTimeout/EpilogTimeout on Slurm 25.05+)",
			prologTimeout, bound, timing.SlurmMargin, bound-timing.SlurmMargin)
	})
}
