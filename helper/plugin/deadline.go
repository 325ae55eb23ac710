package plugin

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// The job prolog and epilog each run within one total deadline, computed
// once when they start, that covers every step they take (stale-record
// sweep, Slurm queries, the wait for the supervisor's report, killing a
// failed start, writing the record; in the epilog the drain and the final
// kill). A prolog or epilog that Slurm kills at its own timeout drains the
// node, so the deadline is the plugstack's prolog_timeout, and never more
// than Slurm's timeout for the script less SlurmMargin.
const (
	// SlurmMargin is kept free below Slurm's PrologTimeout/EpilogTimeout
	// (or PrologEpilogTimeout) for slurmd's own work around the script.
	SlurmMargin = 5 * time.Second
	// KillReserve is kept free at the end of the prolog to kill a failed
	// start (the supervisor's cgroup, bounded by 5 s) and write the record.
	KillReserve = 6 * time.Second
	// GroupKillBound bounds the epilog's kill of what is left in the job's
	// cgroup after the drain.
	GroupKillBound = 5 * time.Second
	// QueryBound bounds one Slurm query from the prolog.
	QueryBound = 5 * time.Second
)

// SlurmTimeouts are Slurm's bounds on the job prolog and epilog (0: none).
type SlurmTimeouts struct{ Prolog, Epilog time.Duration }

// slurmTimeouts reads PrologTimeout, EpilogTimeout (Slurm 25.05+, each
// overriding) and PrologEpilogTimeout from slurm.conf at path (the prolog's
// SLURM_CONF), bounded to 1 MiB. Keys are case-insensitive; Include files
// are not followed. A missing file or key means no bound known.
func slurmTimeouts(path string) SlurmTimeouts {
	var st SlurmTimeouts
	if path == "" {
		return st
	}
	f, err := os.Open(filepath.Clean(path))
	if err != nil {
		return st
	}
	defer f.Close()
	var both, pro, epi time.Duration
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		for _, kv := range strings.Fields(line) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || n >= 65534 { // 65534: INFINITE16, no bound
				continue
			}
			d := time.Duration(n) * time.Second
			switch strings.ToLower(k) {
			case "prologepilogtimeout":
				both = d
			case "prologtimeout":
				pro = d
			case "epilogtimeout":
				epi = d
			}
		}
	}
	st.Prolog, st.Epilog = both, both
	if pro > 0 {
		st.Prolog = pro
	}
	if epi > 0 {
		st.Epilog = epi
	}
	return st
}

// budget is the plugin's deadline for a script Slurm bounds by slurmBound:
// prolog_timeout, and never more than slurmBound less SlurmMargin.
func budget(prologTimeout int, slurmBound time.Duration) time.Duration {
	b := time.Duration(prologTimeout) * time.Second
	if slurmBound > 0 {
		b = min(b, slurmBound-SlurmMargin)
	}
	return max(b, time.Second)
}

// warnTimeouts tells the admin, once per node and setting, when the
// plugstack's prolog_timeout is not below Slurm's own bound (the plugin then
// uses Slurm's bound less SlurmMargin). The marker lives in root's record
// dir for the node.
func warnTimeouts(recordDir, node string, prologTimeout int, st SlurmTimeouts, log logrus.FieldLogger) {
	bound := st.Prolog
	if st.Epilog > 0 && (bound == 0 || st.Epilog < bound) {
		bound = st.Epilog
	}
	if bound == 0 || time.Duration(prologTimeout)*time.Second < bound-SlurmMargin {
		return
	}
	marker := filepath.Join(recordDir, node, ".timeouts-warned")
	want := fmt.Sprintf("prolog_timeout=%d slurm=%s\n", prologTimeout, bound)
	if old, err := readBounded(marker, 256); err == nil && old == want {
		return
	}
	log.Warnf("plugstack prolog_timeout=%d is not below Slurm's prolog/epilog timeout (%s) less %s: the plugin uses %s; set prolog_timeout lower, or raise PrologEpilogTimeout (PrologTimeout/EpilogTimeout on Slurm 25.05+)",
		prologTimeout, bound, SlurmMargin, bound-SlurmMargin)
	_ = os.WriteFile(marker, []byte(want), 0o600)
}
