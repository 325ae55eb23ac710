package slurm

import (
	"strconv"
	"time"
)

// Timeouts are Slurm's bounds on the job prolog and epilog (0: none).
type Timeouts struct{ Prolog, Epilog time.Duration }

// ReadTimeouts reads PrologTimeout, EpilogTimeout (Slurm 25.05+, each
// overriding) and PrologEpilogTimeout from slurm.conf at path (the prolog's
// SLURM_CONF) by ReadConf. A missing file or key means no bound known.
func ReadTimeouts(path string) Timeouts {
	var st Timeouts
	if path == "" {
		return st
	}
	c, err := ReadConf(path)
	if err != nil {
		return st
	}
	bound := func(key string) time.Duration {
		v, _ := c.Get(key)
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n >= 65534 { // 65534: INFINITE16, no bound
			return 0
		}
		return time.Duration(n) * time.Second
	}
	both := bound("PrologEpilogTimeout")
	st.Prolog, st.Epilog = both, both
	if d := bound("PrologTimeout"); d > 0 {
		st.Prolog = d
	}
	if d := bound("EpilogTimeout"); d > 0 {
		st.Epilog = d
	}
	return st
}
