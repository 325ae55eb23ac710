package supervise

import (
	"os"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// TargetOwnerPoll is how often the supervisor looks at who listens on the
// ports of the job's model services.
const TargetOwnerPoll = 5 * time.Second

// A scrape of localhost:<port> keeps whatever answers there, whoever owns
// the listener: on a shared node another user's process may hold the port
// a job's model service was meant to use (it started first, or took the
// port while the service restarted), and its series would be stamped as
// the job's. The collector cannot tell; the supervisor, the job's user on
// the node, can: every TargetOwnerPoll it reads the node's listening
// sockets (one sock_diag dump of listeners, no connection) and notes each
// model-service target whose port is listened on by a socket of another
// uid. The note goes to the supervisor's log once per target and uid, and
// to state.json (ForeignTargets), where inspect names it beside the
// run's trouble. dcgm-exporter and node_exporter are the node's, run by
// root or a service user by design, and are not looked at.

// serviceTargets are the node's model-service scrape targets (Targets but
// dcgm and node).
func (s *supervisor) serviceTargets() []render.Target {
	var out []render.Target
	for _, t := range render.Targets(render.Input{Resolved: s.opt.Resolved, Job: render.JobOf(s.opt.Resolved, s.opt.Facts)}) {
		if t.Job == "dcgm" || t.Job == "node" {
			continue
		}
		out = append(out, t)
	}
	return out
}

// checkTargetOwners notes the service targets served by another uid now;
// it writes state.json when a note is new.
func (s *supervisor) checkTargetOwners(status string) {
	targets := s.serviceTargets()
	if len(targets) == 0 {
		return
	}
	listen, err := launch.NodeListeners()
	if err != nil {
		return
	}
	me := uint32(os.Getuid())
	now := time.Now().UTC().Format(time.RFC3339)
	changed := false
	for _, t := range targets {
		for _, sk := range listen[t.Port] {
			if sk.UID == me {
				continue
			}
			i := s.foreignIndex(t.Job, t.Port, sk.UID)
			if i < 0 {
				if len(s.foreign) >= jobdir.MaxForeignTargets {
					continue
				}
				s.foreign = append(s.foreign, jobdir.ForeignTarget{Job: t.Job, Port: t.Port, UID: sk.UID, First: now, Last: now})
				s.log.Warnf("the scrape target %s (127.0.0.1:%d) is served by uid %d, not the job's user: its series are not the job's", t.Job, t.Port, sk.UID)
				changed = true
				continue
			}
			if s.foreign[i].Last != now {
				s.foreign[i].Last = now
				changed = true
			}
		}
	}
	if changed {
		s.writeState(status, "")
	}
}

func (s *supervisor) foreignIndex(job string, port int, uid uint32) int {
	for i, f := range s.foreign {
		if f.Job == job && f.Port == port && f.UID == uid {
			return i
		}
	}
	return -1
}
