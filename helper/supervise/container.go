package supervise

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// endAdopted ends what a container runtime left running after the
// collector's last run: the processes this supervisor adopted as their
// subreaper (their parent exited) in a session not its own, such as
// rootless Podman's pause process, which holds the user namespace and
// outlives `podman run`; on a node without the collector's cgroup nothing
// else would end it. They are SIGKILLed, reaped and logged, and the scan is
// made again until one finds none, within 2 s: a process killed in one
// scan can leave children of its own to this supervisor (conmon's
// `podman container cleanup`, which conmon starts when the container
// exits). A host collector leaves none.
func (s *supervisor) endAdopted() {
	if s.o.Container == "" {
		return
	}
	me := os.Getpid()
	own, err := proc.ReadStat(me)
	if err != nil {
		return
	}
	var ended []string
	killed := map[int]bool{} // killed, not yet reaped
	seen := map[int]bool{}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		found := false
		pids, _ := proc.Pids()
		for _, pid := range pids {
			if seen[pid] {
				continue
			}
			st, err := proc.ReadStat(pid)
			if err != nil || st.PPID != me || st.Session == own.Session || st.State == 'Z' {
				continue
			}
			comm, _ := proc.Comm(pid)
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				ended = append(ended, fmt.Sprintf("%d (%s)", pid, comm))
				killed[pid], seen[pid], found = true, true, true
			}
		}
		for pid := range killed {
			var ws syscall.WaitStatus
			if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid || err != nil {
				delete(killed, pid)
			}
		}
		if !found && len(killed) == 0 {
			break
		}
	}
	if len(ended) == 0 {
		return
	}
	s.log.Infof("otel.container_runtime: ended what the runtime left running after the collector: %s", strings.Join(ended, ", "))
}

// removeRunDir removes {rundir} and everything in it, once no collector
// runs; what cannot be removed (a runtime's file of a subordinate uid) is
// logged and left. Dirs of mode 0 (an overlay file system's work dir, which
// rootless Podman leaves behind a container it failed to start) are made
// 0700 first: they are this user's.
func (s *supervisor) removeRunDir() {
	if s.rundir == "" {
		return
	}
	filepath.WalkDir(s.rundir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() && d.Type()&fs.ModeSymlink == 0 {
			os.Chmod(p, 0o700) // before WalkDir reads it
		}
		return nil
	})
	err := os.RemoveAll(s.rundir)
	if errors.Is(err, fs.ErrPermission) {
		s.unshareRemove()
	}
	// A process the runtime left, ended just before, may still let go of
	// its files for a moment: try again within runDirRemoveBound.
	for deadline := time.Now().Add(runDirRemoveBound); err != nil; time.Sleep(100 * time.Millisecond) {
		if err = os.RemoveAll(s.rundir); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		s.log.Warnf("otel.container_runtime: removing the run dir %s: %v", s.rundir, err)
	}
	s.rundir = ""
}

// runDirRemoveBound bounds the removal of {rundir} at the supervisor's end.
const runDirRemoveBound = 2 * time.Second

// unshareRemove removes, inside the runtime's user namespace, the dirs
// in {rundir} the user cannot read after its own removal failed for want
// of permission:
// rootless Podman with the user's subordinate ids sometimes leaves an
// overlay dir of one of those ids (mode 0700) in its storage, which the
// user cannot enter but root of the namespace can. For a Podman line only
// (podmanUnshare), as the job's user with the line's own per-job
// environment (its `env` prefix and global options: XDG_RUNTIME_DIR,
// --root, --runroot; no token), within unshareBound; the pause
// process it may start again is ended (endAdopted). Nothing runs as root:
// the worst it can remove is what the user's namespace owns, in {rundir}.
// Its outcome is logged.
func (s *supervisor) unshareRemove() {
	// The dirs the user cannot read, only: Podman mounts its storage's
	// overlay dir again in the namespace, where rm cannot remove a mount
	// point (EBUSY); the user removes the rest after.
	var left []string
	filepath.WalkDir(s.rundir, func(p string, d fs.DirEntry, err error) error {
		if err != nil && errors.Is(err, fs.ErrPermission) && p != s.rundir {
			left = append(left, p)
			return fs.SkipDir
		}
		return nil
	})
	argv := podmanUnshare(s.launchArgs.argv, left)
	if len(left) == 0 || argv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), unshareBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if h := os.Getenv("HOME"); h != "" {
		cmd.Env = append(cmd.Env, "HOME="+h)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Milliseconds()
	s.endAdopted()
	if err != nil {
		s.log.Warnf("otel.container_runtime: podman unshare rm -rf in the run dir %s: %v (%d ms) %s", s.rundir, err, took, strings.TrimSpace(string(out)))
		return
	}
	s.log.Infof("otel.container_runtime: removed what the user could not in the run dir %s inside Podman's user namespace (podman unshare rm -rf, %d ms): %s", s.rundir, took, strings.Join(left, " "))
}

// unshareBound bounds `podman unshare rm -rf` at the supervisor's end:
// 0.24-1.1 s on a 2-core test host at load 10 to 20, where 2 of 4 runs
// still took more than 2 s. It comes out of the epilog's wait for the
// supervisor (timing.Policy.DrainWait), whose collector's stop is mostly
// unused; a supervisor still removing at its end is ended with the
// group, and the dir is left as before.
const unshareBound = 4 * time.Second

// podmanUnshare is the command that runs `rm -rf -- paths` in the user
// namespace of the Podman line argv (the collector's runtime command, its
// placeholders filled): argv up to its `run` subcommand (an `env VAR=...`
// prefix and Podman's global options kept), then `unshare rm -rf --
// paths`. nil when argv does not run podman (by its base name) with a
// `run` subcommand.
func podmanUnshare(argv, paths []string) []string {
	for i, a := range argv {
		if filepath.Base(a) != "podman" {
			continue
		}
		for r := i + 1; r < len(argv); r++ {
			if argv[r] == "run" {
				out := append(append([]string{}, argv[:r]...), "unshare", "rm", "-rf", "--")
				return append(out, paths...)
			}
		}
		return nil
	}
	return nil
}

// containerEnvNames are the variables a collector in a container needs
// from the runtime's environment: the tokens its configuration reads as
// ${env:...} (the backend token's only with otel.delivery: collector,
// backendTokenInCollector) and GOMEMLIMIT. A runtime that starts the
// container with a clean environment (apptainer --cleanenv, podman,
// enroot) passes them only when told: APPTAINERENV_<NAME> in its
// environment (containerEnv), or {envname} in otel.container_runtime.
func (s *supervisor) containerEnvNames() []string {
	var names []string
	if s.backendTokenInCollector() {
		names = append(names, s.o.TokenEnv)
	}
	return append(names, render.ReceiverTokenEnv, render.PluginTokenEnv, "GOMEMLIMIT")
}
