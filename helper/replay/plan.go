package replay

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// Kinds of a Plan: what a node dir's receipt says of the backend's copy.
const (
	// KindComplete: final figures, nothing lost, every item of the files
	// counted as written: the backend accepted everything the node's
	// collector took. Skipped (but for the lines appended after the
	// collector's exit that the backend did not take at the drain).
	KindComplete = "complete"
	// KindLost: the backend did not get some items (send or enqueue
	// failures). Sent whole.
	KindLost = "lost"
	// KindNotFinal: the figures are not final or leave items unaccounted
	// for (receipt.Unknown). Sent whole.
	KindNotFinal = "not final"
	// KindNoReceipt: no receipt.json, or one that does not read. Sent
	// whole.
	KindNoReceipt = "no receipt"
	// KindUncounted: the files hold more items than the receipt counts as
	// written (an earlier run of the job wrote to the same dir). Sent
	// whole.
	KindUncounted = "uncounted"
	// KindNeverSent: the job's remote export was off (otel.delivery:
	// none): the backend has none of it. Sent whole.
	KindNeverSent = "never sent"
)

// Plan is what replay sends of one node dir, decided from its receipt.json
// and the items its files hold. The files cannot tell which items reached
// the backend: a dir is skipped, or sent whole.
type Plan struct {
	// Dir is the node dir; Name the node it is named for (the receipt's
	// node, else nodes/<node>), "" when neither says; Link the chain
	// link's job id ("" for the job itself).
	Dir, Name, Link string
	// Files are the dir's non-empty jsonl files, counted (Scan).
	Files []File
	// Kind is KindComplete, KindLost, KindNotFinal, KindNoReceipt,
	// KindUncounted or KindNeverSent; Whole is false only for KindComplete.
	Kind  string
	Whole bool
	// Items is the files' items as an exporter counts them (spans,
	// metric points, log records).
	Items int64
	// Had is the items the receipt says the backend accepted (the
	// collector's Sent, plus the appended lines the supervisor delivered);
	// a lower bound when LowerBound, unknown (0) for KindNoReceipt and a
	// receipt without figures.
	Had        int64
	LowerBound bool
	// Lost is the items the receipt says the backend did not get
	// (KindLost); Extra the items of the files beyond those the receipt
	// counts as written (KindUncounted).
	Lost, Extra int64
	// Why says, in one clause, why the figures are not final or the
	// receipt does not read (KindNotFinal, KindNoReceipt).
	Why string
	// Undelivered counts the lines the receipt lists as appended after the
	// collector's exit and not delivered to the backend at the drain.
	Undelivered int
}

// Plans decides, for every node dir of dirs (NodeDirs' order), whether
// the backend already has everything the dir's collector accepted (its
// receipt.json: final figures, nothing unaccounted for, nothing lost, and
// no more items in the files than it counts as written): such a dir is
// not sent. Every other dir with files is sent whole. Dirs without a
// non-empty jsonl file are left out. Errors: a file that does not read.
func Plans(dirs []jobdir.NodeDir) ([]Plan, error) {
	var plans []Plan
	for _, d := range dirs {
		files, err := Scan([]string{d.Path})
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			continue
		}
		plans = append(plans, decide(d, files))
	}
	return plans, nil
}

// decide is the plan of one node dir with files.
func decide(d jobdir.NodeDir, files []File) Plan {
	p := Plan{Dir: d.Path, Name: d.Node, Link: d.Link, Files: files, Whole: true}
	inFiles := map[string]int64{}
	for _, f := range files {
		p.Items += f.Exported
		inFiles[f.Signal] += f.Exported
	}
	r, err := receipt.Read(d.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		p.Kind, p.Why = KindNoReceipt, "no receipt.json (its collector has not drained, or its supervisor was killed before it could write one)"
		return p
	case err != nil:
		p.Kind, p.Why = KindNoReceipt, fmt.Sprintf("its receipt.json does not read (%v)", err)
		return p
	}
	if r.Node != "" {
		p.Name = r.Node
	}
	if r.RemoteExportOff {
		p.Kind = KindNeverSent
		return p
	}
	for _, sig := range receipt.Signals {
		c := r.Signals[sig]
		p.Had += c.Sent
		p.Lost += c.Lost()
	}
	for _, a := range r.Appended {
		if a.Delivered {
			p.Had += int64(a.Spans + a.Points)
		} else {
			p.Undelivered++
		}
	}
	if !r.Complete() || len(r.Unknown) > 0 {
		p.Kind, p.LowerBound = KindNotFinal, r.Basis == receipt.BasisLastRead
		why := "its figures are not final"
		if r.Complete() {
			why = "its receipt does not account for every item"
		}
		if len(r.Unknown) > 0 {
			why += " (" + r.Unknown[0] + ")"
		}
		p.Why = why
		return p
	}
	if p.Lost > 0 {
		p.Kind = KindLost
		return p
	}
	for sig, n := range inFiles {
		c := r.Signals[sig]
		covered := c.Written
		switch sig {
		case "traces":
			covered += r.AppendedSpans()
		case "metrics":
			covered += r.AppendedPoints()
		}
		p.Extra += max(0, n-covered)
	}
	if p.Extra > 0 {
		p.Kind = KindUncounted
		return p
	}
	p.Kind, p.Whole = KindComplete, false
	return p
}

// label is how a line names a group of plans: their nodes as one Slurm
// hostlist ("2 nodes gn[1-2]", "gn3"), " of link <job id>", or the dir
// when no node is named.
func label(ps []Plan) string {
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	l := ""
	switch {
	case len(ps) == 1 && ps[0].Name == "":
		return ps[0].Dir
	case len(ps) == 1:
		l = ps[0].Name
	default:
		l = fmt.Sprintf("%d nodes %s", len(ps), slurm.CompressHostlist(names))
	}
	if ps[0].Link != "" {
		l += " of link " + ps[0].Link
	}
	return l
}

// PlanLines are replay's lines on its plans, one per group of node dirs
// that agree (same kind, same link, all named), in the order of their
// first dir: which are skipped and why, which are sent whole and why,
// and that the items the backend already had from those arrive again.
// all: every dir is sent (--all).
func PlanLines(plans []Plan, all bool) []string {
	type group struct {
		key string
		ps  []Plan
	}
	var groups []*group
	at := map[string]*group{}
	for _, p := range plans {
		// Dirs named by no node are not folded; neither are reasons that
		// differ.
		key := fmt.Sprintf("%s/%s/%t", p.Kind, p.Link, p.Undelivered > 0 && !all)
		if p.Name == "" {
			key += "/" + p.Dir
		}
		if p.Kind == KindNotFinal || p.Kind == KindNoReceipt {
			key += "/" + p.Why
		}
		g := at[key]
		if g == nil {
			g = &group{key: key}
			at[key] = g
			groups = append(groups, g)
		}
		g.ps = append(g.ps, p)
	}
	var lines []string
	for _, g := range groups {
		lines = append(lines, "replay: "+groupLine(g.ps, all))
	}
	return lines
}

// groupLine is the line of plans of one kind and link.
func groupLine(ps []Plan, all bool) string {
	var items, had, lost, extra int64
	undelivered := 0
	low := false
	for _, p := range ps {
		items += p.Items
		had += p.Had
		lost += p.Lost
		extra += p.Extra
		undelivered += p.Undelivered
		low = low || p.LowerBound
	}
	one := len(ps) == 1
	its, they := pick(one, "its", "their"), pick(one, "it", "them")
	receipts := pick(one, "its receipt says", "their receipts say")
	collectors := pick(one, "its collector", "their collectors")
	l := label(ps)
	again := func() string {
		switch {
		case had == 0 && (ps[0].Kind == KindNoReceipt || ps[0].Kind == KindNotFinal):
			return fmt.Sprintf("whatever the backend already had from %s will arrive again", they)
		case had == 0:
			return fmt.Sprintf("the backend had accepted none of %s items, so none arrives twice", its)
		case low:
			return fmt.Sprintf("at least %d items the backend already had from %s will arrive again", had, they)
		}
		return fmt.Sprintf("the %d items the backend already had from %s will arrive again", had, they)
	}
	switch ps[0].Kind {
	case KindComplete:
		if all {
			return fmt.Sprintf("sending %s whole (--all): %s the backend accepted everything %s took (final figures, nothing failed): %s", l, receipts, collectors, again())
		}
		if undelivered > 0 {
			return fmt.Sprintf("%s: %s the backend accepted everything %s took (final figures, nothing failed); sending only the %d %s appended after %s exit that the backend did not take at the drain",
				l, receipts, collectors, undelivered, pick(undelivered == 1, "line", "lines"), pick(one, "its collector's", "their collectors'"))
		}
		return fmt.Sprintf("skipped %s: %s the backend accepted everything %s took (final figures, nothing failed; %d items in %s files)", l, receipts, collectors, items, its)
	case KindLost:
		if had == 0 {
			return fmt.Sprintf("sending %s whole: %s the backend did not get %d of %s items; %s", l, receipts, lost, its, again())
		}
		return fmt.Sprintf("sending %s whole: %s the backend did not get %d of %s items; the files cannot tell which, so %s", l, receipts, lost, its, again())
	case KindUncounted:
		return fmt.Sprintf("sending %s whole: %s files hold %d items more than %s counts as written (an earlier run of the job wrote to the same dir: a requeue, or a chain sharing the job dir); the files cannot tell which the backend has, so %s",
			l, its, extra, pick(one, "its receipt", "their receipts"), again())
	case KindNeverSent:
		return fmt.Sprintf("sending %s whole: %s remote export was off (otel.delivery: none), so the backend has none of %s %d items", l, receipts, its, items)
	case KindNoReceipt:
		return fmt.Sprintf("sending %s whole: %s: what the backend has from %s is not known; %s", l, ps[0].Why, they, again())
	}
	return fmt.Sprintf("sending %s whole: %s: what the backend missed is not known; %s", l, strings.Replace(ps[0].Why, "its ", its+" ", 1), again())
}

func pick(one bool, a, b string) string {
	if one {
		return a
	}
	return b
}

// nodeDirs is Dirs with each dir's node and link.
func nodeDirs(dir string) (dirs []jobdir.NodeDir, skipped []string, err error) {
	dir = jobdir.OtelDir(dir)
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, err
	}
	root, err := RealPath(dir)
	if err != nil {
		return nil, nil, err
	}
	dirs, skipped = jobdir.NodeDirs(dir, func(p string) bool { return Inside(root, p) })
	return dirs, skipped, nil
}
