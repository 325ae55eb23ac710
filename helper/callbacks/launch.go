package callbacks

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// MaxReadinessBytes bounds what the prolog reads of the supervisor's
// readiness line (launch.Readiness: one JSON line; the user's program could otherwise write without end).
const MaxReadinessBytes = 64 * 1024

// supervisor is a started `<cli> supervise --from-env`.
type supervisor struct {
	*proc.Child
	pid       int
	readiness *os.File
	group     *cgroup.Group // nil on a node without cgroups
}

// startSupervisor starts the supervisor as the job's user (uid, gid,
// groups; proc.StartAsUser: its own session, no_new_privs, no descriptor
// of this process, oom_score_adj 0), with exactly env, fd 3 the write end
// of the readiness pipe and fd 4 the control socket's listener hold when not
// nil (launch.ControlListenerFD), then the gate's read end when not nil
// (named with its descriptor in launch.EnvGateFD), then the node's RAPL
// zones' energy_uj (read-only; named with their descriptors in
// launch.EnvHostEnergy), born inside group g when not nil
// (cgroup.Group.StartInside): on v2 placed there by clone3
// (CLONE_INTO_CGROUP), on v1 forked by a thread of its own that alone
// joins g around the fork and is discarded after; this process never
// enters the user's group, and no instant exists in which the supervisor,
// or anything it starts, is outside it. A thread that cannot leave g
// again fails the start. The supervisor lowers its resource limits to the
// node's ordinary ones itself, first thing (see proc.LowerToNodeLimits).
func startSupervisor(cli string, env []string, uid, gid uint32, groups []uint32, g *cgroup.Group, hold, gate *os.File, energy []launch.EnergyZone) (*supervisor, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	cmd := exec.Command(cli, "supervise", "--from-env")
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{w} // fd 3 = launch.ReadinessFD
	if hold != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, hold) // fd 4 = launch.ControlListenerFD
	}
	cmd.Env = append([]string(nil), env...)
	if gate != nil {
		cmd.Env = append(cmd.Env, launch.EnvGateFD+"="+launch.FormatGateFD(launch.ReadinessFD+len(cmd.ExtraFiles)))
		cmd.ExtraFiles = append(cmd.ExtraFiles, gate)
	}
	if len(energy) > 0 {
		// Read-only descriptors the supervisor reads and never reopens:
		// named in its environment with the descriptor each lands on.
		cmd.Env = append(cmd.Env, launch.EnvHostEnergy+"="+launch.FormatEnergyZones(energy, launch.ReadinessFD+len(cmd.ExtraFiles)))
		for _, z := range energy {
			cmd.ExtraFiles = append(cmd.ExtraFiles, z.File)
		}
	}
	var inside func(*exec.Cmd) error
	if g != nil {
		inside = g.StartInside
	}
	if err := proc.StartAsUser(cmd, proc.Credential{UID: uid, GID: gid, Groups: groups}, inside); err != nil {
		r.Close()
		return nil, err
	}
	return &supervisor{Child: proc.Watch(cmd), pid: cmd.Process.Pid, readiness: r, group: g}, nil
}

// readBounded reads at most max bytes of path.
func readBounded(path string, max int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max))
	return string(b), err
}

// wait reads the readiness line (at most MaxReadinessBytes), bounded by
// timeout.
func (s *supervisor) wait(timeout time.Duration) (launch.Readiness, error) {
	type result struct {
		line []byte
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := bufio.NewReaderSize(io.LimitReader(s.readiness, MaxReadinessBytes+1), MaxReadinessBytes).ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			line, err = nil, fmt.Errorf("the supervisor's report is longer than %d bytes", MaxReadinessBytes)
		}
		ch <- result{append([]byte(nil), line...), err}
	}()
	select {
	case res := <-ch:
		s.readiness.Close()
		if res.err != nil && len(res.line) == 0 {
			if errors.Is(res.err, io.EOF) {
				return launch.Readiness{}, fmt.Errorf("the supervisor exited without a report")
			}
			return launch.Readiness{}, res.err
		}
		return launch.ReadReadiness(res.line)
	case <-time.After(timeout):
		s.readiness.Close()
		return launch.Readiness{}, fmt.Errorf("no report from the supervisor within %s (health_check_timeout_seconds + 5, within the prolog's deadline: plugstack prolog_timeout, below Slurm's PrologEpilogTimeout)", timeout.Round(100*time.Millisecond))
	}
}

// kill ends the supervisor and everything it started (its cgroup, which
// it then removes, else its session) and reaps it, each within
// timing.GroupKillBound.
func (s *supervisor) kill() {
	if s.group != nil {
		_, _ = s.group.Kill(timing.GroupKillBound)
	}
	s.KillGroup()
	s.WaitExit(timing.GroupKillBound)
	if s.group != nil {
		_ = s.group.Remove()
	}
}
