package slurm

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Timeouts are Slurm's bounds on the job prolog and epilog (0: none).
type Timeouts struct{ Prolog, Epilog time.Duration }

// ReadTimeouts reads PrologTimeout, EpilogTimeout (Slurm 25.05+, each
// overriding) and PrologEpilogTimeout from slurm.conf at path (the prolog's
// SLURM_CONF), bounded to 1 MiB. Keys are case-insensitive; Include files
// are not followed. A missing file or key means no bound known.
func ReadTimeouts(path string) Timeouts {
	var st Timeouts
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
