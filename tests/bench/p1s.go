package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
)

// flaggedSteps runs `srun -N1 true` n times as steps of one allocation
// (`salloc -N1`, with --gym-otel when flag is set) and returns each wall
// time in seconds; the first step (a warm-up) is not counted.
func mustRead(p string) []byte {
	b, _ := os.ReadFile(p)
	return b
}

// baseName is the baseline checkout's commit (short), or its path.
func baseName(dir string) string {
	if out, err := sh("git", "-C", dir, "rev-parse", "--short", "HEAD"); err == nil {
		return "commit " + strings.TrimSpace(out)
	}
	return dir
}

// usePluginAt installs a plugstack snippet loading the plugin installed
// in dir and restarts slurmd; usePlugin(true) restores the bench's own.
func usePluginAt(dir string) error {
	if err := os.WriteFile(snippet, []byte(slurmkit.PlugstackLine(dir, recordDir)), 0o644); err != nil {
		return err
	}
	_, err := sh(filepath.Join(repo, "tests/slurm/restart-slurmd.sh"))
	return err
}

func flaggedSteps(n int, flag bool) ([]float64, error) {
	opt := ""
	if flag {
		opt = " --gym-otel"
	}
	loop := fmt.Sprintf(`srun -N1 true || exit 1; for i in $(seq %d); do s=$(date +%%s%%N); srun -N1 true || exit 1; e=$(date +%%s%%N); echo $((e-s)); done`, n)
	out, err := asUser("salloc -N1 --quiet"+opt+" bash -c '"+loop+"'", flag, 300*time.Second)
	if err != nil {
		return nil, err
	}
	var v []float64
	for _, f := range strings.Fields(out) {
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("timing %q in %q", f, out)
		}
		v = append(v, float64(ns)/1e9)
	}
	if len(v) != n {
		return nil, fmt.Errorf("got %d timings, want %d: %q", len(v), n, out)
	}
	return v, nil
}

// runP1s measures `srun true` as a step of a --gym-otel allocation against
// the same in an allocation without the flag, the plugin installed
// throughout: rounds of three blocks, flag / no flag / flag again (the
// A-against-A control), n steps each. Each flagged step tells the job's
// supervisor its start and its end on the control socket (spank/phase.c); a
// last flagged step under strace gives the time of those two exchanges.
//
// base, when not "", is a checkout whose build/ holds an earlier plugin,
// core and CLI (GYM_OTEL_BENCH_BASELINE): each round then also measures the
// same pair of blocks with that build installed instead.
func runP1s(rounds, n int, base string) ([]Row, error) {
	baseDir := baselineDir
	if base != "" {
		if err := slurmkit.Install(base, baseDir, "build/gym_otel.so", "build/gym_otel_core.so", "build/gym-otel-spank"); err != nil {
			return nil, fmt.Errorf("GYM_OTEL_BENCH_BASELINE=%s: %v", base, err)
		}
		if err := os.WriteFile(filepath.Join(baseDir, "site.yaml"), mustRead(filepath.Join(installDir, "site.yaml")), 0o644); err != nil {
			return nil, err
		}
	}
	if err := usePlugin(true); err != nil {
		return nil, err
	}
	type round struct{ a, b, a2, ba, bb []float64 }
	var rs []round
	for r := 0; r < rounds; r++ {
		var rd round
		var err error
		blocks := []struct {
			name string
			flag bool
			base bool
			to   *[]float64
		}{{"flag", true, false, &rd.a}, {"no flag", false, false, &rd.b}}
		if base != "" {
			blocks = append(blocks, struct {
				name string
				flag bool
				base bool
				to   *[]float64
			}{"baseline build, flag", true, true, &rd.ba}, struct {
				name string
				flag bool
				base bool
				to   *[]float64
			}{"baseline build, no flag", false, true, &rd.bb})
		}
		blocks = append(blocks, struct {
			name string
			flag bool
			base bool
			to   *[]float64
		}{"flag (control)", true, false, &rd.a2})
		cur := false
		for _, blk := range blocks {
			if blk.base != cur {
				if blk.base {
					err = usePluginAt(baseDir)
				} else {
					err = usePlugin(true)
				}
				if err != nil {
					return nil, err
				}
				cur = blk.base
			}
			if err = waitIdle(30 * time.Second); err != nil {
				return nil, err
			}
			logf("P1s round %d/%d: %s", r+1, rounds, blk.name)
			if *blk.to, err = flaggedSteps(n, blk.flag); err != nil {
				return nil, err
			}
		}
		rs = append(rs, rd)
		logf("P1s round %d: step %.1f/%.1f/%.1f ms (flag/no flag/flag); baseline build %.1f/%.1f ms (flag/no flag)", r+1,
			1000*median(rd.a), 1000*median(rd.b), 1000*median(rd.a2), 1000*median(rd.ba), 1000*median(rd.bb))
	}
	var on, off, a, a2, diffs, ctl []float64
	for _, rd := range rs {
		on = append(append(on, rd.a...), rd.a2...)
		off = append(off, rd.b...)
		a, a2 = append(a, rd.a...), append(a2, rd.a2...)
		diffs = append(diffs, median(append(append([]float64(nil), rd.a...), rd.a2...))-median(rd.b))
		ctl = append(ctl, median(rd.a2)-median(rd.a))
	}
	d := median(on) - median(off)
	lo, hi := minmax(diffs)
	clo, chi := minmax(ctl)
	q1on, q3on := quart(on)
	q1off, q3off := quart(off)
	ratio := median(on) / median(off)
	rows := []Row{{
		ID:   "P1",
		What: fmt.Sprintf("srun true, a step of a --gym-otel job / of a job without the flag (n=%d each)", len(off)),
		Figure: fmt.Sprintf("%.3f, %+.1f ms (%.1f / %.1f ms; IQR %.1f-%.1f / %.1f-%.1f ms)", ratio, 1000*d, 1000*median(on), 1000*median(off),
			1000*q1on, 1000*q3on, 1000*q1off, 1000*q3off),
		Spread: fmt.Sprintf("rounds %+.1f..%+.1f ms; A/A %+.1f ms (%+.1f..%+.1f)", 1000*lo, 1000*hi,
			1000*(median(a2)-median(a)), 1000*clo, 1000*chi),
		Target: "<= 1.01 (the unflagged step, same run)", Met: yes(ratio <= 1.01),
	}}
	if base != "" {
		var bon, boff, bd []float64
		for _, rd := range rs {
			bon, boff = append(bon, rd.ba...), append(boff, rd.bb...)
			bd = append(bd, median(rd.ba)-median(rd.bb))
		}
		blo, bhi := minmax(bd)
		bdiff := median(bon) - median(boff)
		rows = append(rows, Row{
			ID:   "P1",
			What: fmt.Sprintf("the same with the baseline build (%s), flag / no flag", baseName(base)),
			Figure: fmt.Sprintf("%.3f, %+.1f ms (%.1f / %.1f ms)", median(bon)/median(boff), 1000*bdiff,
				1000*median(bon), 1000*median(boff)),
			Spread: fmt.Sprintf("rounds %+.1f..%+.1f ms", 1000*blo, 1000*bhi),
			Target: "-", Met: "-",
		}, Row{
			ID:   "P1",
			What: "the flagged step: this build / the baseline build",
			Figure: fmt.Sprintf("%.3f, %+.1f ms (%.1f / %.1f ms)", median(on)/median(bon), 1000*(median(on)-median(bon)),
				1000*median(on), 1000*median(bon)),
			Spread: fmt.Sprintf("unflagged step, this build / the baseline build: %.3f", median(off)/median(boff)),
			Target: "-", Met: "-",
		}, Row{
			ID:     "P1",
			What:   "flag on minus flag off: this build minus the baseline build",
			Figure: fmt.Sprintf("%+.1f ms", 1000*(d-bdiff)),
			Spread: fmt.Sprintf("A/A %+.1f ms", 1000*(median(a2)-median(a))),
			Target: "<= 0 (no more than before)", Met: yes(d-bdiff <= 0),
		})
		if err := usePlugin(true); err != nil {
			return nil, err
		}
	}
	ex, err := phaseExchanges()
	if err == nil && (len(ex["start"]) == 0 || len(ex["end"]) == 0) {
		err = fmt.Errorf("no step start/end exchange in the trace")
	}
	if err != nil {
		logf("P1s: strace of one flagged step: %v", err)
		rows = append(rows, Row{ID: "P1", What: "the step's two hold-socket exchanges (strace -T, one step)", Figure: "no sample", Target: "-", Met: "?"})
		return rows, nil
	}
	rows = append(rows, Row{
		ID:     "P1",
		What:   "the step's two hold-socket exchanges, connect to answer (strace, one flagged step)",
		Figure: fmt.Sprintf("start %.2f ms, end %.2f ms (median)", median(ex["start"]), median(ex["end"])),
		Spread: fmt.Sprintf("start %s, end %s ms; strace slows each call", msList(ex["start"]), msList(ex["end"])),
		Target: "<= 250 ms each (the bound)", Met: yes(maxOf(ex["start"]) <= 250 && maxOf(ex["end"]) <= 250),
	})
	return rows, nil
}

// phaseExchanges runs one flagged allocation of three steps on gn1 while
// strace follows its slurmd (and so each step's slurmstepd), and returns
// the wall time in ms of each phase exchange on the control socket, from
// connect to the close of its descriptor, by phase ("start", "end").
func phaseExchanges() (map[string][]float64, error) {
	// The bench's slurmd of gn1 (other Slurm instances may run a gn1 too).
	pid := 0
	for _, p := range findProc("slurmd -D -N gn1 ") {
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if strings.Contains(string(cl), benchBase+"/") {
			pid = p
		}
	}
	if pid == 0 {
		return nil, fmt.Errorf("no slurmd of gn1 under %s", benchBase)
	}
	trace := filepath.Join(benchBase, "p1s.strace")
	_ = os.Remove(trace)
	st := exec.Command("strace", "-f", "-tt", "-T", "-e", "trace=socket,connect,getsockopt,sendto,poll,ppoll,read,close", "-o", trace, "-p", strconv.Itoa(pid))
	if err := st.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = st.Process.Signal(os.Interrupt); _ = st.Wait() }()
	time.Sleep(time.Second)
	if _, err := asUser("salloc -N1 -w gn1 --quiet --gym-otel bash -c 'for i in 1 2 3; do srun -N1 true; sleep 0.3; done'", true, 120*time.Second); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	_ = st.Process.Signal(os.Interrupt)
	_ = st.Wait()
	data, err := os.ReadFile(trace)
	if err != nil {
		return nil, err
	}
	return parseExchanges(string(data)), nil
}

var (
	reConnect = regexp.MustCompile(`^(\d+)\s+(\d+):(\d+):(\d+\.\d+) connect\((\d+), \{sa_family=AF_UNIX, sun_path=@?"([^"]*)"`)
	reClose   = regexp.MustCompile(`^(\d+)\s+(\d+):(\d+):(\d+\.\d+) close\((\d+)\)`)
	reSend    = regexp.MustCompile(`sendto\(\d+, "step (start|end) `)
)

func clockMs(h, m, s string) float64 {
	hh, _ := strconv.Atoi(h)
	mm, _ := strconv.Atoi(m)
	ss, _ := strconv.ParseFloat(s, 64)
	return float64(hh*3600+mm*60)*1000 + ss*1000
}

// parseExchanges finds, in an strace -f -tt log, each connect to a unix
// socket (the control socket's path) followed on the same pid and descriptor by a
// "step start|end" send, and returns connect-to-close in ms by phase.
func parseExchanges(log string) map[string][]float64 {
	type open struct {
		t     float64
		phase string
	}
	cur := map[string]*open{}
	out := map[string][]float64{}
	for _, l := range strings.Split(log, "\n") {
		if m := reConnect.FindStringSubmatch(l); m != nil {
			cur[m[1]+"/"+m[5]] = &open{t: clockMs(m[2], m[3], m[4])}
			continue
		}
		f := strings.Fields(l)
		if m := reSend.FindStringSubmatch(l); m != nil && len(f) > 2 {
			fd := strings.TrimPrefix(strings.SplitN(f[2], ",", 2)[0], "sendto(")
			if o := cur[f[0]+"/"+fd]; o != nil {
				o.phase = m[1]
			}
			continue
		}
		if m := reClose.FindStringSubmatch(l); m != nil {
			k := m[1] + "/" + m[5]
			if o := cur[k]; o != nil {
				if o.phase != "" {
					out[o.phase] = append(out[o.phase], clockMs(m[2], m[3], m[4])-o.t)
				}
				delete(cur, k)
			}
		}
	}
	return out
}

func msList(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.2f", x))
	}
	return strings.Join(s, "/")
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		if x > m {
			m = x
		}
	}
	return m
}
