package slurm

import (
	"strconv"
	"time"
)

// Timeouts are Slurm's bounds on the job prolog and epilog (0: none).
type Timeouts struct{ Prolog, Epilog time.Duration }

// Settings are what the job prolog reads of slurm.conf, in one read.
type Settings struct {
	Timeouts
	// SrunPortRange is slurm.conf's SrunPortRange as written
	// ("60001-63000"; "": not set, sruns listen on the kernel's
	// ephemeral ports).
	SrunPortRange string
}

// ReadSettings reads Settings from slurm.conf at path (the prolog's
// SLURM_CONF) by ReadConf: the timeouts as ReadTimeouts, and
// SrunPortRange. A missing file or key: zero values.
func ReadSettings(path string) Settings {
	var s Settings
	if path == "" {
		return s
	}
	c, err := ReadConf(path)
	if err != nil {
		return s
	}
	s.Timeouts = timeoutsOf(c)
	s.SrunPortRange, _ = c.Get("SrunPortRange")
	return s
}

// ReadTimeouts reads PrologTimeout, EpilogTimeout (Slurm 25.05+, each
// overriding) and PrologEpilogTimeout from slurm.conf at path (the prolog's
// SLURM_CONF) by ReadConf. A missing file or key means no bound known.
func ReadTimeouts(path string) Timeouts {
	return ReadSettings(path).Timeouts
}

// timeoutsOf is ReadTimeouts of a read slurm.conf.
func timeoutsOf(c Conf) Timeouts {
	var st Timeouts
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
