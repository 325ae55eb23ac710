package replay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// Checkpointed is what a replay from the delivery checkpoints did (a job
// whose supervisors delivered the files: otel.delivery files): it sends,
// of each node dir, exactly the lines past delivery.json's offsets, with
// helper/delivery, and advances the same checkpoints, so a replay
// interrupted or run twice sends nothing twice.
type Checkpointed struct {
	// Planned counts the items (PlannedLines the lines) past the
	// checkpoints before the replay: what it set out to send.
	Planned, PlannedLines int64
	// Accepted and Rejected count what the backend answered for in this
	// replay; Duplicates is this replay's upper bound of items the backend
	// may hold twice (a request retried after a timeout).
	Accepted, Rejected, Duplicates int64
	// Left counts the items still past the checkpoints after the replay
	// (0: the backend has answered for every line).
	Left int64
	// Err is why the replay stopped before the files' end ("": it did
	// not).
	Err string
	// Lines are the summary lines.
	Lines []string
}

// checkpointedDirs reports whether every node dir's files were delivered
// by its supervisor from a checkpoint: a delivery.json, or a receipt with
// a delivery section.
func checkpointedDirs(dirs []string) bool {
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, delivery.CheckpointFile)); err == nil {
			continue
		}
		if r, err := receipt.Read(d); err == nil && r.Delivery != nil {
			continue
		}
		return false
	}
	return len(dirs) > 0
}

// acknowledged sums the items the checkpoints count as accepted by the
// backend (what --all sends again).
func acknowledged(dirs []string) int64 {
	var n int64
	for _, d := range dirs {
		cp, err := delivery.ReadCheckpoint(d)
		if err != nil {
			continue
		}
		for _, p := range cp.Files {
			n += p.Accepted
		}
	}
	return n
}

// ReplayRetryFor bounds the retries of one request of a replay from the
// checkpoints: a backend that answers no attempt within it ends the
// replay (the checkpoint stays; replay again).
const ReplayRetryFor = 60 * time.Second

// runCheckpointed replays dirs from their checkpoints (Checkpointed).
func runCheckpointed(ctx context.Context, opt Options, dirs []string, start time.Time) (*Result, error) {
	c := &Checkpointed{}
	res := &Result{Signals: map[string]*Totals{}, Checkpointed: c}
	for _, d := range dirs {
		bl, err := delivery.Backlogs(d)
		if err != nil {
			return nil, err
		}
		var items, lines int64
		for _, b := range bl {
			items += b.Items
			lines += b.Lines
		}
		c.Planned += items
		c.PlannedLines += lines
		if lines > 0 {
			fmt.Fprintf(opt.Out, "replay: %s: %d items in %d lines past the delivery checkpoint (%s): the backend has not acknowledged them\n", d, items, lines, delivery.CheckpointFile)
		}
	}
	if c.PlannedLines == 0 {
		c.Lines = []string{fmt.Sprintf("replay: nothing to send: the backend has acknowledged every line of the files (%s of %d node %s; --all sends everything again)",
			delivery.CheckpointFile, len(dirs), plural(len(dirs), "dir"))}
		res.Done, res.Took = true, time.Since(start)
		return res, nil
	}
	uid := opt.Uid
	if uid == 0 {
		uid = os.Getuid()
	}
	var paths []string
	for _, d := range dirs {
		paths = append(paths, d)
		for _, sig := range delivery.Signals {
			paths = append(paths, filepath.Join(d, jobdir.SignalFile(sig)))
		}
	}
	foreign := checkOwner(paths, uid)
	if foreign != nil && (opt.Endpoint == "" || opt.TokenEnv == "") {
		return nil, foreign
	}
	endpoint, tokenEnv, err := target(opt)
	if err != nil {
		return nil, err
	}
	token, ok := opt.LookupEnv(tokenEnv)
	if !ok || token == "" {
		return nil, fmt.Errorf("--token-env: the variable %s is not set or empty: export %s=<bearer token> as at submit", tokenEnv, tokenEnv)
	}
	if err := config.CheckToken(tokenEnv, token); err != nil {
		return nil, err
	}
	res.Endpoint, res.TokenEnv = endpoint, tokenEnv
	fmt.Fprintf(opt.Out, "replay: sending %d items (%d lines) past the checkpoints to %s\n", c.Planned, c.PlannedLines, endpoint)
	ctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	defer cancel()
	for _, d := range dirs {
		do := delivery.Options{
			Dir: d, Endpoint: endpoint, Headers: map[string]string{"Authorization": "Bearer " + token},
			Compression: "gzip", Retry: delivery.Retry{MaxElapsed: ReplayRetryFor},
		}
		if foreign == nil && checkpointAuth([]string{d}) {
			// The job's delivery added the token as a resource attribute
			// (otel.token_resource_attribute): so does replay (not for a
			// directory someone else wrote: that is the job's choice).
			do.ResourceAttributes = map[string]string{"Authorization": "Bearer " + token}
		}
		st, err := delivery.Run(ctx, do)
		if st != nil {
			t := st.Total()
			c.Accepted += t.Accepted
			c.Rejected += t.Rejected
			c.Duplicates += t.DuplicatesBound
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("--timeout %v passed", opt.Timeout)
			}
			c.Err = err.Error()
			break
		}
	}
	for _, d := range dirs {
		bl, err := delivery.Backlogs(d)
		if err != nil {
			return nil, err
		}
		for _, b := range bl {
			c.Left += b.Items
		}
	}
	res.Took = time.Since(start)
	res.Done = c.Err == ""
	c.Lines = append(c.Lines, fmt.Sprintf("replay: the backend %s accepted %d items, rejected %d for good (not sent again); at most %d duplicates from retries after a timeout",
		endpoint, c.Accepted, c.Rejected, c.Duplicates))
	if c.Err == "" {
		c.Lines = append(c.Lines, fmt.Sprintf("replay complete: the backend has answered for every line of the files in %v (the checkpoints are advanced: a replay again sends nothing)", res.Took.Round(time.Millisecond)))
	} else {
		c.Lines = append(c.Lines, fmt.Sprintf("replay INCOMPLETE after %v: %d items are still past the checkpoints (%s); nothing of the files is lost: replay again sends exactly those", res.Took.Round(time.Millisecond), c.Left, c.Err))
	}
	return res, nil
}

// checkpointAuth reports whether a checkpoint of dirs names the
// Authorization resource attribute: the job's delivery from the files
// added the token to every resource it sent (otel.token_resource_attribute).
func checkpointAuth(dirs []string) bool {
	for _, d := range dirs {
		if cp, err := delivery.ReadCheckpoint(d); err == nil && slices.Contains(cp.ResourceAttributes, "Authorization") {
			return true
		}
	}
	return false
}

// nodeOf names the node of a node dir for messages: nodes/<node>, else
// the first node's dir.
func nodeOf(dir string) string {
	if filepath.Base(filepath.Dir(filepath.Clean(dir))) == "nodes" {
		return "node " + filepath.Base(filepath.Clean(dir))
	}
	return "the job's first node"
}

// lockDirs takes each node dir's delivery lock (delivery.Lock) for the
// whole replay, whatever it sends: a supervisor still delivering from the
// same checkpoint holds it (a second sender would send the same lines
// again, and a replay through a collector would send them besides), and
// so does another replay. A held lock refuses the replay, naming the node
// dir and --while-delivering, unless opt.WhileDelivering (then a
// warning). Where the lock cannot tell (a file system without flock(2), a
// lock file the caller may not open), a collector that state.json says is
// still running is warned about. It returns the release of the locks
// taken.
func lockDirs(opt Options, dirs []string) (release func(), err error) {
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	for _, d := range dirs {
		r, err := delivery.Lock(d)
		var locked *delivery.LockedError
		switch {
		case err == nil:
			releases = append(releases, r)
			if st := collectorStatus(d); st != "" && st != jobdir.StatusDrained && st != jobdir.StatusFailed && checkpointedDirs([]string{d}) {
				// Free, yet not drained: its supervisor was killed, or
				// the file system's locks are node-local (Lustre's
				// localflock) and it delivers on its node.
				fmt.Fprintf(opt.Out, "replay: warning: the collector of %s is %s (%s), and no process here holds %s: if its supervisor still runs on its node (a file system whose locks are node-local) it delivers from %s too, and lines may reach the backend twice; replay after the job's end\n", d, st, jobdir.StateFile, delivery.LockFile, delivery.CheckpointFile)
			}
			continue
		case errors.As(err, &locked) && !opt.WhileDelivering:
			release()
			return nil, fmt.Errorf("%s (%s): its supervisor is still delivering the files to the backend from %s (or another replay is: it holds %s); replay after the job's end, or give --while-delivering to send alongside it (lines may then reach the backend twice)",
				d, nodeOf(d), delivery.CheckpointFile, delivery.LockFile)
		case errors.As(err, &locked):
			fmt.Fprintf(opt.Out, "replay: warning: --while-delivering: %s (%s) is being delivered from %s by another process now: the same lines may reach the backend twice, and its checkpoint may end behind what either sent\n", d, nodeOf(d), delivery.CheckpointFile)
			continue
		}
		if st := collectorStatus(d); st != "" && st != jobdir.StatusDrained && st != jobdir.StatusFailed {
			// No lock to tell: its supervisor may be delivering from the
			// same checkpoint (or was killed before its drain).
			fmt.Fprintf(opt.Out, "replay: warning: the collector of %s is %s (%s) and %v: if its supervisor still runs it delivers from %s too, and lines may reach the backend twice; replay after the job's end\n", d, st, jobdir.StateFile, err, delivery.CheckpointFile)
		}
	}
	return release, nil
}
