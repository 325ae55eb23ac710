package inspect

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

func unixMs(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// Build reads every node dir of the job whose otel/ dir (or job dir) is
// dir, streaming, and returns its report. A node dir without any jsonl file
// is an error naming it; lines that do not parse are counted, not fatal.
func Build(dir string) (*Report, error) {
	return build(Sources(dir))
}

// BuildNode is Build of the one node dir dir (none of its nodes/ or links/
// subdirs), whose node is node ("" for the host.name its resources
// carry): what one node's supervisor reads of its own files at the drain
// (its energy per step, StepEnergy). Errors: Build's.
func BuildNode(dir, node string) (*Report, error) {
	return build([]Source{{Dir: dir, Node: node}})
}

func build(srcs []Source) (*Report, error) {
	a := newAggregator()
	for _, src := range srcs {
		d := &dirStat{src: src, lines: map[string]int{}, bad: map[string]int{}, firstBad: map[string]string{}, up: map[[2]string]*scrapeLog{}}
		a.dirs = append(a.dirs, d)
		a.cur = d
		found := 0
		running := collectorRuns(src.Dir)
		for _, sig := range signals {
			path := filepath.Join(src.Dir, jobdir.SignalFile(sig))
			err := readFile(path, func(dl decoded) {
				if dl.err != nil && dl.unterminated > 0 && running {
					// The collector is writing this line: not an
					// error, and not a line yet.
					if d.writing == nil {
						d.writing = map[string]int{}
					}
					d.writing[sig] = dl.unterminated
					return
				}
				d.lines[sig]++
				if dl.err != nil {
					d.bad[sig]++
					if d.firstBad[sig] == "" {
						d.firstBad[sig] = fmt.Sprintf("line %d: %v", d.lines[sig], dl.err)
					}
					return
				}
				a.metrics(dl.line)
				a.traces(dl.line)
				a.logs(dl.line)
			})
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if errors.Is(err, os.ErrPermission) {
				return nil, notReadable(path, err)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			found++
		}
		if found == 0 {
			return nil, fmt.Errorf("%s: no metrics.jsonl, traces.jsonl or logs.jsonl", src.Dir)
		}
	}
	r := a.report()
	r.Dir = srcs[0].Dir
	if err := r.health(a); err != nil {
		return nil, err
	}
	r.absences(a)
	r.receipts(srcs)
	r.summarise()
	r.outcome()
	return r, nil
}

func (a *aggregator) report() *Report {
	r := &Report{Version: ReportVersion}
	// Each attribute's values in natural order (gn2 before gn10; the
	// string "0" before the int 0).
	for _, v := range a.identity {
		sort.SliceStable(v, func(i, j int) bool {
			if v[i].Text != v[j].Text {
				return slurm.NaturalLess(v[i].Text, v[j].Text)
			}
			return v[i].Kind > v[j].Kind
		})
	}
	r.Job = Job{Identity: a.identity, Start: unixMs(a.firstMs), End: unixMs(a.lastMs),
		DurationSeconds: Value(math.NaN()), Producers: a.producers, MetricNames: a.metricNames}
	if a.firstMs > 0 {
		r.Job.DurationSeconds = Value(float64(a.lastMs-a.firstMs) / 1000)
	}
	for _, d := range a.dirs {
		if d.node != "" && !contains(r.Job.Nodes, d.node) {
			r.Job.Nodes = append(r.Job.Nodes, d.node)
		}
	}
	sort.SliceStable(r.Job.Nodes, func(i, j int) bool { return slurm.NaturalLess(r.Job.Nodes[i], r.Job.Nodes[j]) })
	r.Gym = a.gym()
	// Per-node lists in the nodes' natural order (gn2 before gn10).
	r.ModelServers = a.modelServers()
	sort.SliceStable(r.ModelServers, func(i, j int) bool {
		a, b := r.ModelServers[i].Node, r.ModelServers[j].Node
		if a == "(all)" || b == "(all)" {
			return b == "(all)" && a != "(all)" // the sum over the servers last
		}
		return slurm.NaturalLess(a, b)
	})
	r.Routers = a.routers()
	r.GPUs = a.gpus()
	sort.SliceStable(r.GPUs, func(i, j int) bool { return slurm.NaturalLess(r.GPUs[i].Node, r.GPUs[j].Node) })
	r.GPUSharing = a.gpuSharing()
	r.Energy = a.energy(r)
	r.Hosts = a.hosts(r.Job.Nodes)
	r.Spans = a.spanReport()
	r.Phases = a.phases()
	r.StepEnergy, r.RoleEnergy, r.EnergyMatching = a.stepEnergy(r.Phases)
	r.HostEnergy = a.hostEnergy(r.Phases)
	r.FirstRollout = a.firstRollout(r.Phases)
	r.FirstRollout.Parts = append(r.FirstRollout.Parts, startupParts(r.FirstRollout, r.Gym.Telemetry.Startup)...)
	r.TraceTree = a.traceTree()
	r.Cgroups = a.cgroups()
	r.JobLookalikes = JobLookalikes{PhaseSpans: a.lookalikeSpans, CgroupPoints: a.lookalikePoints}
	r.Errors = Errors{Spans: a.errorSpans, SpanExamples: a.errorSpanEx, Logs: a.errorLogs,
		LogExamples: a.errorLogEx, LogsBySeverity: a.logsBySev}
	if r.Errors.SpanExamples == nil {
		r.Errors.SpanExamples = []ErrorSpan{}
	}
	if r.Errors.LogExamples == nil {
		r.Errors.LogExamples = []ErrorLog{}
	}
	return r
}

// health fills Health from the dirs read, their collector.yaml targets and
// state.json.
func (r *Report) health(a *aggregator) error {
	r.Health = Health{Dirs: []DirHealth{}, FailedTargets: []TargetHealth{}, DroppedSeries: a.droppedSer, SkippedPoints: a.skipped,
		DroppedPhaseSpans: a.phasesDropped, DroppedCgroupPoints: a.cgDropped}
	for _, pn := range a.phaseOrder {
		r.Health.DroppedPhaseSpans += pn.dropped
	}
	for _, d := range a.dirs {
		dh := DirHealth{Source: d.src, NodeName: d.node, Lines: d.lines, BadLines: d.bad, Points: d.points, Spans: d.spans,
			Logs: d.logs, Targets: []TargetHealth{}}
		if len(d.firstBad) > 0 {
			dh.FirstBad = d.firstBad
		}
		dh.Writing = d.writing
		for _, n := range d.bad {
			r.Health.BadLines += n
		}
		// The targets of collector.yaml, their scrapes counted from the
		// up points read (no second pass over metrics.jsonl).
		ts, _, err := configTargets(d.src.Dir)
		switch {
		case errors.Is(err, os.ErrNotExist): // no collector.yaml: a backend's files
		case err != nil:
			return err
		}
		for _, t := range ts {
			th := TargetHealth{Dir: d.src.Dir, Job: t.Job, Instance: t.Instance}
			if c := d.up[[2]string{t.Job, t.Instance}]; c != nil {
				th.Scrapes, th.Answered, th.WarmingUp, th.Ended = c.counts()
			}
			if s := d.scrape[[2]string{t.Job, t.Instance}]; s != nil {
				th.LimitHits = s.LimitHits
			}
			dh.Targets = append(dh.Targets, th)
			if th.Failed() > 0 || th.Scrapes == 0 {
				r.Health.FailedTargets = append(r.Health.FailedTargets, th)
			}
		}
		if st, err := jobdir.ReadState(d.src.Dir); err == nil {
			dh.State = &DirState{Status: st.Status, Error: st.Error, Restarts: st.Restarts, ExportProblems: st.ExportProblems, ForeignTargets: st.ForeignTargets}
		}
		r.Health.Dirs = append(r.Health.Dirs, dh)
	}
	return nil
}

// receipts reads each node dir's receipt.json and puts what went wrong in
// Trouble.
func (r *Report) receipts(srcs []Source) {
	r.Receipts, r.Trouble = []NodeReceipt{}, []string{}
	missing := 0
	var lost, hints, unsent, other []string
	replay := ""
	for _, s := range srcs {
		if _, err := os.Stat(filepath.Join(s.Dir, jobdir.ConfigFile)); err != nil {
			continue // not a collector's dir
		}
		nr := NodeReceipt{Dir: s.Dir}
		rc, err := receipt.Read(s.Dir)
		if err != nil {
			nr.Missing = err.Error()
			missing++
		} else {
			liveDelivery(s.Dir, rc)
			nr.Receipt, nr.Summary = rc, rc.Summary()
			if undeliveredAppended(rc) > 0 {
				// A line the supervisor appended after the
				// collector's exit that the backend did not take:
				// in the files, not at the backend.
				for _, l := range nr.Summary {
					if strings.Contains(l, "NOT delivered") {
						unsent = append(unsent, fmt.Sprintf("%s: %s", rc.Node, strings.TrimSpace(l)))
					}
				}
			}
			if h := tokenHint(s.Dir, rc); h != "" {
				hints = append(hints, fmt.Sprintf("%s: %s", rc.Node, h))
			}
			if rc.Trouble() || !rc.Complete() || (rc.Delivery != nil && !rc.Delivery.Complete()) {
				for _, l := range nr.Summary {
					t := strings.TrimSpace(l)
					switch {
					case strings.HasPrefix(t, "LOST:"):
						lost = append(lost, fmt.Sprintf("%s: %s", rc.Node, t))
					case strings.HasPrefix(t, "UNKNOWN:") || strings.Contains(l, "INCOMPLETE") || strings.Contains(l, "NO FIGURES"):
						other = append(other, fmt.Sprintf("%s: %s", rc.Node, t))
					case strings.Contains(t, "replay") && !strings.Contains(t, "NOT delivered") && replay == "":
						// What to do about the loss (the appended
						// lines not delivered are said apart).
						replay = t
					}
				}
			}
		}
		r.Receipts = append(r.Receipts, nr)
	}
	// What the backend lost first, then what to check and what to do
	// about it, then the appended lines not delivered, then what is not
	// known.
	r.Trouble = append(r.Trouble, lost...)
	r.Trouble = append(r.Trouble, hints...)
	if len(lost) > 0 && replay != "" {
		r.Trouble = append(r.Trouble, replay)
	}
	// The supervisor's appended lines the backend did not take: after
	// what the collectors lost (a backend down loses both).
	r.Trouble = append(r.Trouble, unsent...)
	r.Trouble = append(r.Trouble, other...)
	// A final receipt counts everything the state's export problems say:
	// said once, from the receipt.
	final := map[string]bool{}
	for _, nr := range r.Receipts {
		if nr.Receipt != nil && nr.Receipt.Complete() {
			final[filepath.Clean(nr.Dir)] = true
		}
	}
	for _, d := range r.Health.Dirs {
		if d.State != nil && d.State.ExportProblems != "" && !final[filepath.Clean(d.Dir)] {
			r.Trouble = append(r.Trouble, fmt.Sprintf("%s: the collector reported export problems: %s", nodeOr(d), d.State.ExportProblems))
		}
		if d.State == nil {
			continue
		}
		for _, f := range d.State.ForeignTargets {
			r.Trouble = append(r.Trouble, fmt.Sprintf("%s: the scrape target %s (127.0.0.1:%d) was served by uid %d, not the job's user, from %s to %s: its series in this run are another user's process's, not the job's",
				nodeOr(d), f.Job, f.Port, f.UID, f.First, f.Last))
		}
	}
	if missing > 0 {
		r.Trouble = append(r.Trouble, fmt.Sprintf("no receipt.json in %d of %d node dirs: what reached the backend is unknown there "+
			"(the receipt is written at the collector's drain; a job still running, or a collector killed before its drain, has none)", missing, len(r.Receipts)))
	}
}

func nodeOr(d DirHealth) string {
	if d.NodeName != "" {
		return d.NodeName
	}
	return d.Dir
}

// notReadable is the error for a job file this process may not read
// (err, a permission error): which file, whose, its mode and why. A
// job's jsonl files are the job's user's alone by design (mode 0600: they
// hold prompts and completions); the node dir's receipt.json (0644) says
// what reached the files and the backend, and is named when readable.
func notReadable(path string, err error) error {
	msg := fmt.Sprintf("%s: not readable by you (uid %d)", path, os.Getuid())
	owner := ""
	if st, serr := os.Stat(path); serr == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			owner = fmt.Sprintf("uid %d", sys.Uid)
			if u, uerr := user.LookupId(strconv.FormatUint(uint64(sys.Uid), 10)); uerr == nil {
				owner = fmt.Sprintf("%s (uid %d)", u.Username, sys.Uid)
			}
			msg += fmt.Sprintf(": owned by %s, mode %04o", owner, st.Mode().Perm())
		}
	} else {
		msg += ": " + err.Error()
	}
	if strings.HasSuffix(path, ".jsonl") {
		msg += ". A job's jsonl files are readable by the job's user alone, by design: they hold the run's prompts and completions"
		rec := filepath.Join(filepath.Dir(path), receipt.FileName)
		if f, rerr := os.Open(rec); rerr == nil {
			f.Close()
			msg += fmt.Sprintf(". %s is readable: it says what reached the files and the backend", rec)
		}
		who := "the job's user"
		if owner != "" {
			who = owner
		}
		msg += fmt.Sprintf(". Ask %s to run inspect, or for a copy of the directory", who)
	}
	return errors.New(msg)
}

// collectorRuns reports whether dir's state.json says its collector runs
// (starting, ready or draining): then the last line of a file may be
// half written.
func collectorRuns(dir string) bool {
	st, err := jobdir.ReadState(dir)
	if err != nil {
		return false
	}
	switch st.Status {
	case jobdir.StatusStarting, jobdir.StatusReady, jobdir.StatusDraining:
		return true
	}
	return false
}
