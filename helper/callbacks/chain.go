package callbacks

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// parentJob returns the id of the running --gym-otel job this submit runs
// in ("" when it is not nested in one): GYM_OTEL_JOB and SLURM_JOB_ID agree
// and are a job id.
func parentJob(env config.LookupEnv) string {
	in, _ := env(contract.EnvInJob)
	id, _ := env("SLURM_JOB_ID")
	if in == "" || in != id {
		return ""
	}
	if _, err := strconv.ParseUint(id, 10, 32); err != nil {
		return ""
	}
	return id
}

// parentToken finds the backend token of the running job parent for a
// nested submit, whose own environment no longer holds it (the job's
// steps remove it from every task). It reads the token from the
// environment of that job's collector on this node: the process named by
// state.json in the job's output dir, checked to be this user's and to run
// that dir's collector.yaml. resolved is the nested job's resolved settings (the
// same config and job dir as the parent's); tokenEnv names the variable.
// Errors say why no token was found.
func parentToken(resolved *config.Resolved, parent string, env config.LookupEnv) (string, error) {
	f := jobfacts.Facts{JobID: parent}
	f.ArrayJobID, _ = env("SLURM_ARRAY_JOB_ID")
	f.ArrayTaskID, _ = env("SLURM_ARRAY_TASK_ID")
	node, _ := env("SLURMD_NODENAME")
	var dirs []string
	for _, chained := range []string{"", parent} {
		s := *resolved
		s.ChainedFrom = chained
		dirs = append(dirs, jobfacts.OutputDir(&s, f))
		if node != "" {
			g := f
			g.Node, g.NodeIndex = node, 1
			dirs = append(dirs, jobfacts.OutputDir(&s, g))
		}
	}
	var why []string
	deadline := time.Now().Add(restartWait)
	for {
		why = why[:0]
		pending := false
		for _, dir := range dirs {
			tok, err := collectorToken(dir, resolved.Otel.TokenEnv)
			if err == nil {
				return tok, nil
			}
			var r restarting
			if errors.As(err, &r) {
				pending = true
			}
			if !os.IsNotExist(err) {
				why = append(why, err.Error())
			}
		}
		if !pending || time.Now().After(deadline) {
			break
		}
		time.Sleep(restartPoll)
	}
	if len(why) == 0 {
		return "", fmt.Errorf("job %s has no collector state on this node (looked in %s)", parent, strings.Join(dirs, ", "))
	}
	return "", fmt.Errorf("job %s: %s", parent, strings.Join(why, "; "))
}

// restartWait bounds how long a nested submit waits for the running job's
// collector to be back (the supervisor restarts one that exited, on the
// same ports) before it gives up; restartPoll is how often it looks.
var (
	restartWait = 15 * time.Second
	restartPoll = 250 * time.Millisecond
)

// restarting is the error of a collector that is not running while its
// supervisor still is and has not finished: it may be restarting it.
type restarting struct{ error }

// collectorToken takes the running job's backend token for a nested
// submit: from the supervisor's token socket in dir (socketToken), and
// only when there is no such socket (a supervisor of an earlier release)
// from the environment of the collector that state.json in dir names, as
// the value of tokenEnv. An error wraps restarting when no collector runs
// but the supervisor state.json names is still there and has not ended
// (its status is not drained or failed).
func collectorToken(dir, tokenEnv string) (string, error) {
	// The supervisor's token socket first (jobdir.TokenSocket): the
	// collector is not dumpable, its environment not open to this user.
	tok, serr := socketToken(dir)
	if serr == nil {
		return tok, nil
	}
	st, err := jobdir.ReadState(dir)
	if err != nil && !errors.Is(err, jobdir.ErrFormat) {
		return "", err
	}
	jerr := err
	// The supervisor is not dumpable, so its /proc files are root's: only
	// that it has not exited is checked (/proc/<pid>/stat is readable). A
	// pid reused by another process only makes the submit wait
	// restartWait before it fails.
	live := func(err error) error {
		if jerr == nil && st.SupervisorPID > 0 && notExited(st.SupervisorPID) && st.Status != jobdir.StatusDrained && st.Status != jobdir.StatusFailed {
			return restarting{err}
		}
		return err
	}
	if !errors.Is(serr, os.ErrNotExist) {
		return "", live(fmt.Errorf("the token socket of %s: %v", dir, serr))
	}
	// No token socket: a supervisor of an earlier release, whose
	// collector's environment holds the token.
	if jerr != nil || st.CollectorPID <= 0 {
		return "", live(fmt.Errorf("%s/%s names no collector (status %q)", dir, jobdir.StateFile, st.Status))
	}
	if uid, err := proc.Owner(st.CollectorPID); err != nil || int(uid) != os.Getuid() {
		return "", live(fmt.Errorf("its collector (pid %d) is not running as this user here", st.CollectorPID))
	}
	if !runsCollectorOf(st.CollectorPID, dir) {
		return "", fmt.Errorf("pid %d is not the collector of %s", st.CollectorPID, dir)
	}
	environ, err := proc.Environ(st.CollectorPID)
	if err != nil {
		return "", fmt.Errorf("the environment of its collector (pid %d): %v", st.CollectorPID, err)
	}
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(tokenEnv+"=")); ok && len(v) > 0 {
			// The supervisor doubles every $ for the collector's ${env:}
			// expansion (render.Escape in lifecycle's collectorEnv).
			return render.Unescape(string(v)), nil
		}
	}
	return "", fmt.Errorf("its collector (pid %d) holds no %s", st.CollectorPID, tokenEnv)
}

// runsCollectorOf reports whether pid runs the collector of the output dir
// dir: a host collector, started with its configuration by content
// (--config env:<render.ConfigEnv>), whose working dir is dir itself (the
// same directory, not only the same name); or a container runtime whose
// command line names dir's collector.yaml.
func runsCollectorOf(pid int, dir string) bool {
	cmdline, err := proc.Cmdline(pid)
	if err != nil {
		return false
	}
	if bytes.Contains(cmdline, []byte("\x00--config\x00env:"+render.ConfigEnv+"\x00")) {
		cwd, err1 := os.Stat(fmt.Sprintf("/proc/%d/cwd", pid))
		out, err2 := os.Stat(dir)
		return err1 == nil && err2 == nil && os.SameFile(cwd, out)
	}
	return bytes.Contains(cmdline, []byte(filepath.Join(dir, jobdir.ConfigFile)))
}

// notExited reports whether pid names a process that has not exited (a
// zombie not yet reaped has).
func notExited(pid int) bool {
	st, err := proc.ReadStat(pid)
	return err == nil && st.State != 'Z'
}

// maxTokenAnswer bounds the token socket's answer (a token and a newline).
const maxTokenAnswer = 64 << 10

// socketToken asks the token socket in dir (jobdir.TokenSocket) for the
// job's backend token: the socket must be this user's, and so must the
// process that answers (SO_PEERCRED); the exchange is bounded by 2 s.
// Errors: one wrapping os.ErrNotExist when dir has no token socket; else
// why the socket gave no token.
func socketToken(dir string) (string, error) {
	p := filepath.Join(dir, jobdir.TokenSocket)
	fi, err := os.Lstat(p)
	if err != nil {
		return "", err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); fi.Mode()&os.ModeSocket == 0 || !ok || int(st.Uid) != os.Getuid() {
		return "", fmt.Errorf("%s is not a socket of this user's", p)
	}
	c, err := net.DialTimeout("unix", p, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if uid, ok := proc.UnixPeerUID(c.(*net.UnixConn)); !ok || int(uid) != os.Getuid() {
		return "", fmt.Errorf("%s is not served by a process of this user's", p)
	}
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(jobdir.TokenRequest)); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(io.LimitReader(c, maxTokenAnswer)).ReadString('\n')
	tok := strings.TrimSuffix(line, "\n")
	if err != nil || tok == "" {
		return "", fmt.Errorf("%s gave no token (%v)", p, err)
	}
	return tok, nil
}
