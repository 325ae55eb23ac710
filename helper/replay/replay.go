// Package replay sends a job's jsonl files (every node dir, every later link
// of its chain) to the site's OTLP/HTTP backend again, or to another one,
// with the collector's own components: one otlp_json_file receiver per file
// and an otlp_http/backend exporter with its bearer token from the
// environment. The endpoint and the token's variable come from the site
// file, as at submit, or from the caller, never from the replayed
// directory, and a directory the caller does not own is replayed only when
// the caller names both. The file receiver never finishes by itself;
// Run decides from the collector's own counters that everything was read
// (accepted + refused = the items of each file) and sent (sent + failed =
// the items, the sending queue empty), then stops the collector.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/selfmetrics"
)

// Defaults of Options.
const (
	// DefaultTimeout bounds a whole replay.
	DefaultTimeout = 10 * time.Minute
	// DefaultProgress is the interval of the progress lines.
	DefaultProgress = 5 * time.Second
	// DefaultBinary is the collector (otel.binary's default).
	DefaultBinary = "/usr/bin/otelcol-gym"
	poll          = 250 * time.Millisecond
	// stopBound bounds the collector's clean stop once everything is sent
	// (then it is killed).
	stopBound = 5 * time.Second
)

// Options configure one replay.
type Options struct {
	// Dir is a job dir or its otel/ dir.
	Dir string
	// Endpoint is the OTLP/HTTP base URL to send to; "" takes the site
	// file's otel.endpoint.
	Endpoint string
	// TokenEnv names the variable holding the bearer token; "" takes the
	// site file's otel.token_env (default OTEL_TOKEN).
	TokenEnv string
	// Site is the site file and SiteItems the inline site items
	// (plugstack.conf's), read when Endpoint or TokenEnv is "" (both
	// empty: no site settings, and both must be given). The caller finds
	// them as sbatch does (the plugin's plugstack line).
	Site      string
	SiteItems []config.Item
	// Uid is the caller's uid, which must own every replayed dir and file
	// unless both Endpoint and TokenEnv are given (0: os.Getuid()).
	Uid int
	// LookupEnv reads the token variable (nil: os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Binary is the collector to run ("" : DefaultBinary).
	Binary string
	// Timeout bounds the whole replay (0: DefaultTimeout); Progress is the
	// interval of progress lines (0: DefaultProgress).
	Timeout, Progress time.Duration
	// Out receives the progress lines (nil: none).
	Out io.Writer
	// Appended, when set, sends only the lines each node's supervisor
	// appended to its files after the collector had exited (the drain's
	// and the epilog's phase spans, listed in the node dir's receipt.json:
	// receipt.Appended), which no collector sent to the backend; a node
	// dir without a receipt or without such lines adds nothing. Lines the
	// supervisor delivered to the backend itself at the drain
	// (receipt.Appended.Delivered) are skipped unless Force.
	Appended bool
	// Force, with Appended, also sends the lines already delivered.
	Force bool
	// WhileDelivering sends from a node dir's checkpoint even while
	// another process (its supervisor, the job still running, or another
	// replay) holds its delivery lock (delivery.LockFile): without it the
	// replay refuses, naming the node dir.
	WhileDelivering bool
	// All sends every node dir's files whole. Without it (and without
	// Appended) a node dir whose receipt.json says the backend accepted
	// everything its collector took is skipped but for its appended lines
	// not delivered at the drain, and every other dir is sent whole
	// (Plans).
	All bool
}

// Totals are one signal's figures of a replay.
type Totals struct {
	// Files counts the signal's files; Lines and BadLines their lines and
	// the lines that are not OTLP-JSON (not replayed).
	Files, Lines, BadLines int
	// Items are the files' items as the file receiver counts them (spans,
	// metrics, log records); Exported as an exporter counts them (spans,
	// metric data points, log records).
	Items, Exported int64
	// Accepted and Refused are the file receivers' counters (same unit
	// as Items).
	Accepted, Refused int64
	// Sent, SendFailed and EnqueueFailed are the backend exporter's
	// counters (same unit as Exported).
	Sent, SendFailed, EnqueueFailed int64
}

// Result is what a replay did.
type Result struct {
	// Endpoint is where the data went; TokenEnv the token's variable.
	Endpoint, TokenEnv string
	// Signals holds the totals by signal (only signals with files).
	Signals map[string]*Totals
	// Done reports whether every item was read and sent or failed.
	Done bool
	// Took is the replay's duration.
	Took time.Duration
	// Cause is the backend exporter's last failure, in one line, from the
	// collector's log ("" when it logged none).
	Cause string
	// Delivered counts the appended lines skipped because their
	// supervisor had delivered them at the drain (Options.Appended
	// without Force).
	Delivered int
	// Skipped counts the node dirs not sent because their receipts say
	// the backend accepted everything their collectors took (without
	// Options.All and Options.Appended).
	Skipped int
	// Again is the items sent that the receipts say the backend had
	// already accepted (duplicates there); a lower bound when AgainAtLeast.
	Again        int64
	AgainAtLeast bool
	// Refusals counts the export attempts the backend answered with an
	// error status and Silences those it did not answer at all (a request
	// that timed out, a connection refused or reset), from the collector's
	// log.
	Refusals, Silences int
	// RequestTimeout and RetryFor are the exporter's bounds: the timeout
	// of one request and how long a batch is retried (0: not known).
	RequestTimeout, RetryFor time.Duration
	// TimedOut reports that Options.Timeout passed before everything was
	// read and sent or failed.
	TimedOut bool
	// Checkpointed is the replay from the delivery checkpoints (nil: a
	// replay through a collector); its lines are the summary.
	Checkpointed *Checkpointed
}

// Unanswered reports whether the replay fell short only because the
// backend did not answer within the bound: every export failure was a
// request that timed out or found no connection (no HTTP status), none
// was refused with a status, every line parsed and the file receivers
// refused nothing; and either everything was read and sent or failed, or
// Options.Timeout passed. The job's files are unchanged: a replay again
// sends what the backend did not take (exit status 3 of the command).
func (r *Result) Unanswered() bool {
	if r.Checkpointed != nil {
		return false
	}
	if r.OK() || r.Refusals > 0 || r.Silences == 0 {
		return false
	}
	for _, t := range r.Signals {
		if t.BadLines > 0 || t.Refused > 0 {
			return false
		}
	}
	return r.Done || r.TimedOut
}

// notAnswered is the verdict of an Unanswered replay: what the backend did
// not answer within which bound, that the files lost nothing, and what to
// do.
func (r *Result) notAnswered(took time.Duration, failed, pending, unread int64) string {
	var bound []string
	if r.RequestTimeout > 0 {
		bound = append(bound, fmt.Sprintf("each request waited up to %v", r.RequestTimeout))
	}
	if r.RetryFor > 0 {
		bound = append(bound, fmt.Sprintf("each batch was retried for up to %v", r.RetryFor))
	}
	if r.TimedOut {
		bound = append(bound, fmt.Sprintf("--timeout %v passed", took))
	}
	b := ""
	if len(bound) > 0 {
		b = " (" + strings.Join(bound, "; ") + ")"
	}
	var sent int64
	for _, t := range r.Signals {
		sent += t.Sent
	}
	what := fmt.Sprintf("%d items failed after the retries", failed)
	if r.TimedOut {
		what = fmt.Sprintf("%d items failed after the retries, %d were still waiting for an answer, %d not yet read", failed, pending, unread)
	}
	again := "run replay again when the backend answers"
	if sent > 0 {
		again += fmt.Sprintf(" (the %d items it did accept will arrive again)", sent)
	}
	return fmt.Sprintf("replay NOT ANSWERED: the backend %s did not answer within the bound%s: %s; nothing of the job's files is lost (they are unchanged): %s", r.Endpoint, b, what, again)
}

// OK reports whether everything was read and the backend accepted all of it.
func (r *Result) OK() bool {
	if r.Checkpointed != nil {
		return r.Checkpointed.Err == "" && r.Checkpointed.Left == 0
	}
	if !r.Done {
		return false
	}
	for _, t := range r.Signals {
		if t.BadLines > 0 || t.Refused > 0 || t.SendFailed > 0 || t.EnqueueFailed > 0 || t.Sent != t.Exported {
			return false
		}
	}
	return true
}

// Summary is one line per signal, telling apart what the file receivers
// read, what the backend accepted, what failed and what was still
// pending; then a verdict and, when exports failed, their cause in one
// line.
func (r *Result) Summary() []string {
	if r.Checkpointed != nil {
		return r.Checkpointed.Lines
	}
	var lines []string
	units := map[string][2]string{"traces": {"spans", "spans"}, "metrics": {"metrics", "points"}, "logs": {"log records", "log records"}}
	var unread, pending, failed int64
	pendingUnknown := false
	for _, sig := range Signals {
		t, ok := r.Signals[sig]
		if !ok {
			continue
		}
		u := units[sig]
		p := t.pending()
		ps := fmt.Sprint(p)
		if p < 0 {
			ps, pendingUnknown = "unknown", true
		} else {
			pending += p
		}
		unread += t.unread()
		failed += t.SendFailed + t.EnqueueFailed
		l := fmt.Sprintf("%-7s %d %s: read %d of %d %s (%d refused); backend: %d of %d %s accepted, %d failed, %s pending",
			sig, t.Files, plural(t.Files, "file"), t.Accepted, t.Items, u[0], t.Refused, t.Sent, t.Exported, u[1], t.SendFailed+t.EnqueueFailed, ps)
		if t.BadLines > 0 {
			l += fmt.Sprintf("; %d %s not OTLP-JSON, not sent", t.BadLines, plural(t.BadLines, "line"))
		}
		lines = append(lines, l)
	}
	took := r.Took.Round(time.Millisecond)
	if r.Delivered > 0 {
		lines = append(lines, fmt.Sprintf("%d appended %s skipped: the supervisor delivered %s to the backend at the drain (receipt.json; --force sends %s again)",
			r.Delivered, plural(r.Delivered, "line"), map[bool]string{true: "it", false: "them"}[r.Delivered == 1], map[bool]string{true: "it", false: "them"}[r.Delivered == 1]))
		if len(r.Signals) == 0 {
			return append(lines, "replay: nothing left to send")
		}
	}
	if r.Skipped > 0 && len(r.Signals) == 0 {
		return append(lines, fmt.Sprintf("replay: nothing left to send: the receipts say the backend accepted everything the job's collectors took (%d node %s; --all sends every dir again)",
			r.Skipped, plural(r.Skipped, "dir")))
	}
	if r.Again > 0 {
		atLeast := ""
		if r.AgainAtLeast {
			atLeast = "at least "
		}
		lines = append(lines, fmt.Sprintf("of the items sent, %s%d the backend had already accepted (the receipts say so): each it accepts again it holds twice", atLeast, r.Again))
	}
	switch {
	case r.Unanswered():
		lines = append(lines, r.notAnswered(took, failed, pending, unread))
	case r.OK():
		lines = append(lines, fmt.Sprintf("replay complete: the backend %s accepted everything in %v", r.Endpoint, took))
	case !r.Done && unread > 0:
		lines = append(lines, fmt.Sprintf("replay INCOMPLETE after %v: %d items of the files not read yet, %d read but not yet accepted or failed", took, unread, pending))
	case !r.Done && (pending > 0 || pendingUnknown):
		lines = append(lines, fmt.Sprintf("replay INCOMPLETE after %v: everything was read; %d items were still on their way to the backend %s (neither accepted nor failed)", took, pending, r.Endpoint))
	case !r.Done:
		lines = append(lines, fmt.Sprintf("replay INCOMPLETE after %v: everything was read and sent or failed, but the collector's counters had not settled", took))
	default:
		lines = append(lines, fmt.Sprintf("replay done with LOSSES: the backend %s did not accept %d items (refused or failed after the retries)", r.Endpoint, failed))
	}
	if r.Cause != "" && (failed > 0 || !r.OK()) {
		lines = append(lines, "cause: "+r.Cause)
		if hint := tokenHint(HTTPStatus(r.Cause), r.TokenEnv); hint != "" {
			lines = append(lines, hint)
		}
	}
	return lines
}

// tokenHint is what to check when the backend answered status: for 401
// (and 403) the token, naming the variable it came from; "" otherwise.
func tokenHint(status int, tokenEnv string) string {
	switch status {
	case 401:
		return fmt.Sprintf("hint: the backend did not accept the bearer token: check $%s, the variable replay read it from (--token-env, else the site's otel.token_env): is it this backend's token, and not expired?", tokenEnv)
	case 403:
		return fmt.Sprintf("hint: the backend accepted no data from the bearer token in $%s (--token-env, else the site's otel.token_env): check that token's rights on this backend", tokenEnv)
	}
	return ""
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// Run replays opt.Dir. It returns the result and an error when the replay
// could not start (no files, no token, no collector), was interrupted (ctx),
// or timed out; the collector is stopped on every path. A result whose OK
// is false without an error means the backend refused or lost data.
func Run(ctx context.Context, opt Options) (*Result, error) {
	start := time.Now()
	if opt.LookupEnv == nil {
		opt.LookupEnv = os.LookupEnv
	}
	if opt.Binary == "" {
		opt.Binary = DefaultBinary
	}
	if opt.Timeout == 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Progress == 0 {
		opt.Progress = DefaultProgress
	}
	if opt.Out == nil {
		opt.Out = io.Discard
	}
	nodes, skipped, err := nodeDirs(opt.Dir)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, n := range nodes {
		dirs = append(dirs, n.Path)
	}
	for _, d := range skipped {
		fmt.Fprintf(opt.Out, "replay: warning: %s leads outside %s: not replayed\n", d, dirs[0])
	}
	release, err := lockDirs(opt, dirs)
	if err != nil {
		return nil, err
	}
	defer release()
	root, err := RealPath(dirs[0])
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "gym-otel-replay.")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var all []File
	var planLines []string
	delivered, skippedDirs := 0, 0
	var again int64
	againAtLeast := false
	if opt.Appended {
		all, delivered, err = ScanAppended(dirs, tmp, opt.Force, opt.Out)
		if err == nil && len(all) == 0 && delivered == 0 {
			err = fmt.Errorf("--appended: no node dir of %s lists lines appended after its collector's exit (receipt.json)", dirs[0])
		}
	} else if checkpointedDirs(dirs) && !opt.All {
		// The supervisors delivered the files from a checkpoint: exactly
		// what lies past it.
		return runCheckpointed(ctx, opt, dirs, start)
	} else {
		var plans []Plan
		plans, err = Plans(nodes)
		if err != nil {
			return nil, err
		}
		planLines = PlanLines(plans, opt.All)
		if opt.All && checkpointedDirs(dirs) {
			// The receipts do not count what the supervisors delivered:
			// the checkpoints' warning below says it.
			planLines = nil
		}
		var complete []string
		for _, p := range plans {
			if p.Whole || opt.All {
				all = append(all, p.Files...)
				again += p.Had
				againAtLeast = againAtLeast || p.LowerBound
				continue
			}
			skippedDirs++
			if p.Undelivered > 0 {
				complete = append(complete, p.Dir)
			}
		}
		if len(complete) > 0 {
			var more []File
			more, _, err = ScanAppended(complete, tmp, false, io.Discard)
			all = append(all, more...)
		}
	}
	if err != nil {
		return nil, err
	}
	var files []File
	for _, f := range all {
		if Inside(root, f.source()) {
			files = append(files, f)
		} else {
			fmt.Fprintf(opt.Out, "replay: warning: %s leads outside %s: not replayed\n", f.source(), dirs[0])
		}
	}
	cfgFile := filepath.Join(dirs[0], jobdir.ConfigFile)
	uid := opt.Uid
	if uid == 0 {
		uid = os.Getuid()
	}
	foreign := checkOwner(append(append([]string{cfgFile}, dirs...), filePaths(files)...), uid)
	if foreign != nil && (opt.Endpoint == "" || opt.TokenEnv == "") {
		return nil, foreign
	}
	for _, l := range planLines {
		fmt.Fprintln(opt.Out, l)
	}
	if len(files) == 0 && skippedDirs > 0 && !opt.Appended {
		// Every node dir's receipt says the backend has it all: no
		// collector, no token needed.
		return &Result{Signals: map[string]*Totals{}, Skipped: skippedDirs, Done: true, Took: time.Since(start)}, nil
	}
	endpoint, tokenEnv, err := target(opt)
	if err != nil {
		return nil, err
	}
	be, err := ReadBackend(cfgFile)
	if err != nil {
		return nil, fmt.Errorf("the job's backend settings: %w", err)
	}
	if !be.Auth && checkpointAuth(dirs) {
		// Delivery from the files (no backend exporter rendered) with
		// otel.token_resource_attribute: the checkpoint says so.
		be.Auth = true
	}
	if foreign != nil && be.Auth {
		// Whether the token also goes as a resource attribute is the
		// job's choice, and this job is someone else's.
		be.Auth = false
		fmt.Fprintf(opt.Out, "replay: note: %s asks for the token as a resource attribute too; not done for a directory someone else wrote\n", cfgFile)
	}
	token, ok := opt.LookupEnv(tokenEnv)
	if !ok || token == "" {
		return nil, fmt.Errorf("--token-env: the variable %s is not set or empty: export %s=<bearer token> as at submit", tokenEnv, tokenEnv)
	}
	if err := config.CheckToken(tokenEnv, token); err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if st := collectorStatus(d); st != "" && st != jobdir.StatusDrained && st != jobdir.StatusFailed {
			fmt.Fprintf(opt.Out, "replay: warning: the collector of %s is %s (%s): what it writes from now on is sent too, and its files may end in a half line\n", d, st, jobdir.StateFile)
		}
	}
	res := newResult(endpoint, tokenEnv, files)
	res.RequestTimeout, res.RetryFor = be.Bounds()
	if opt.All && !opt.Appended && checkpointedDirs(dirs) {
		// What the supervisors' deliveries had acknowledged comes twice.
		again, againAtLeast = acknowledged(dirs), false
		fmt.Fprintf(opt.Out, "replay: warning: --all sends every line again: the backend has already acknowledged %d of these items (%s), each it accepts again it holds twice\n", again, delivery.CheckpointFile)
	}
	res.Delivered, res.Skipped, res.Again, res.AgainAtLeast = delivered, skippedDirs, again, againAtLeast
	if len(files) == 0 {
		// Every appended line was delivered at the drain (--force sends
		// them again).
		res.Done, res.Took = true, time.Since(start)
		return res, nil
	}
	return sendResult(send(ctx, sendOptions{
		Files: files, Backend: be, Endpoint: endpoint, TokenEnv: tokenEnv, Token: token, Binary: opt.Binary,
		WorkDir: tmp, Timeout: opt.Timeout, Progress: opt.Progress, Out: opt.Out,
	}, res, start))
}

// sendResult is send's result for a caller: none when the collector did
// not start.
func sendResult(res *Result, started bool, err error) (*Result, error) {
	if !started {
		return nil, err
	}
	return res, err
}

// sendOptions configure send: what to send, where, and how long.
type sendOptions struct {
	// Files are the OTLP-JSON files to send whole (counted: Scan,
	// ScanAppended, CountFile).
	Files []File
	// Backend holds the job's exporter settings (ReadBackend).
	Backend *Backend
	// Endpoint is the OTLP/HTTP base URL; TokenEnv names the variable the
	// collector reads the bearer token from, Token its value.
	Endpoint, TokenEnv, Token string
	// Binary is the collector to run.
	Binary string
	// WorkDir receives the collector's configuration and log (the
	// caller's, removed by the caller).
	WorkDir string
	// Timeout bounds the whole send: the collector's start, the reads and
	// the exports (0: DefaultTimeout); Progress is the interval of
	// progress lines on Out (0: DefaultProgress; nil Out: none).
	Timeout, Progress time.Duration
	Out               io.Writer
}

// newResult is a result with the totals of files counted.
func newResult(endpoint, tokenEnv string, files []File) *Result {
	res := &Result{Endpoint: endpoint, TokenEnv: tokenEnv, Signals: map[string]*Totals{}}
	for _, f := range files {
		t := res.Signals[f.Signal]
		if t == nil {
			t = &Totals{}
			res.Signals[f.Signal] = t
		}
		t.Files++
		t.Lines += f.Lines
		t.BadLines += f.BadLines
		t.Items += f.Items
		t.Exported += f.Exported
	}
	return res
}

// send sends opt.Files to opt.Endpoint with the collector's own file
// receiver and OTLP/HTTP exporter, filling res (its totals counted by the
// caller), timed from start; started reports whether the collector was
// started. The collector is stopped on every path. Errors: the endpoint
// cannot be used or reached, the collector could not start or exited, ctx
// ended or Timeout passed (the result then holds what the counters said).
// A result whose OK is false without an error means the backend refused
// or lost data; its Cause says why.
func send(ctx context.Context, opt sendOptions, res *Result, start time.Time) (_ *Result, started bool, err error) {
	if opt.Timeout == 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Progress == 0 {
		opt.Progress = DefaultProgress
	}
	if opt.Out == nil {
		opt.Out = io.Discard
	}
	ctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	defer cancel()
	if err := preflight(opt.Endpoint, opt.Binary, min(DialTimeout, opt.Timeout)); err != nil {
		return res, false, err
	}
	port, err := freePort()
	if err != nil {
		return res, false, err
	}
	cfg, err := Config(opt.Files, opt.Backend, opt.Endpoint, opt.TokenEnv, port)
	if err != nil {
		return res, false, err
	}
	cfgPath, logPath := filepath.Join(opt.WorkDir, "collector.yaml"), filepath.Join(opt.WorkDir, "collector.log")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return res, false, err
	}
	c, err := startCollector(opt.Binary, cfgPath, logPath, collectorEnv(opt.TokenEnv, opt.Token))
	if err != nil {
		return res, false, err
	}
	defer killCollector(c)
	defer func() { res.Cause, res.Refusals, res.Silences = exportFailures(logPath) }()
	fmt.Fprintf(opt.Out, "replay: %d file(s) to %s (collector pid %d)\n", len(opt.Files), res.Endpoint, c.Cmd.Process.Pid)

	tick := time.NewTicker(poll)
	defer tick.Stop()
	lastProgress := time.Now()
	stable := 0
	var prev string
	for {
		select {
		case <-ctx.Done():
			res.Took = time.Since(start)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				res.TimedOut = true
				if cause := exportCause(logPath); cause != "" {
					return res, true, fmt.Errorf("--timeout: not everything was read and sent within %v; the exports' last failure: %s", opt.Timeout, cause)
				}
				return res, true, fmt.Errorf("--timeout: not everything was read and sent within %v; last lines of the collector's log:\n%s", opt.Timeout, tail(logPath, 3))
			}
			return res, true, fmt.Errorf("interrupted: %w", ctx.Err())
		case <-c.Exited():
			res.Took = time.Since(start)
			return res, true, fmt.Errorf("the collector %s exited (%v); last lines of its log:\n%s", opt.Binary, c.Err(), tail(logPath, 8))
		case <-tick.C:
		}
		m, err := selfmetrics.Scrape(port)
		if err != nil {
			continue // not up yet
		}
		queue := update(m, res, opt.Files)
		done := true
		for i, f := range opt.Files {
			id := fileReceiverID(i)
			if m.Of(selfmetrics.ReceiverAccepted, f.Signal, id)+m.Of(selfmetrics.ReceiverRefused, f.Signal, id)+m.Of(selfmetrics.ReceiverFailed, f.Signal, id) < f.Items {
				done = false
			}
		}
		for _, t := range res.Signals {
			if t.Sent+t.SendFailed+t.EnqueueFailed < t.Exported && t.Refused == 0 {
				done = false
			}
		}
		// With refusals the exporters' total is not known in advance: wait
		// until the figures stop moving.
		state := fmt.Sprint(queue, summaryKey(res))
		if state == prev {
			stable++
		} else {
			stable = 0
		}
		prev = state
		if done && queue == 0 && stable >= 2 {
			res.Done = true
			res.Took = time.Since(start)
			c.StopGroup(stopBound, false)
			return res, true, nil
		}
		if time.Since(lastProgress) >= opt.Progress {
			lastProgress = time.Now()
			fmt.Fprintf(opt.Out, "replay: %s, queue %d\n", progress(res), queue)
		}
	}
}

func summaryKey(r *Result) string {
	var b strings.Builder
	for _, sig := range Signals {
		if t, ok := r.Signals[sig]; ok {
			fmt.Fprintf(&b, "%d/%d/%d/%d/%d/%d;", t.Accepted, t.Refused, t.Sent, t.SendFailed, t.EnqueueFailed, t.Items)
		}
	}
	return b.String()
}

func progress(r *Result) string {
	var parts []string
	for _, sig := range Signals {
		if t, ok := r.Signals[sig]; ok {
			parts = append(parts, fmt.Sprintf("%s %d/%d read, %d/%d sent, %d failed", sig, t.Accepted+t.Refused, t.Items, t.Sent, t.Exported, t.SendFailed+t.EnqueueFailed))
		}
	}
	return strings.Join(parts, "; ")
}

// collectorEnv is the replay collector's whole environment. The token is
// referenced inside "Bearer ${env:X}", where the collector expands the
// substituted value once more: every "$" is doubled (render.Escape, as the supervisor does).
func collectorEnv(tokenEnv, token string) []string {
	env := []string{tokenEnv + "=" + render.Escape(token), "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if h := os.Getenv("HOME"); h != "" {
		env = append(env, "HOME="+h)
	}
	return env
}

// update fills the totals from the replay collector's own counters and
// returns the backend exporter's queue size.
func update(m selfmetrics.Counters, r *Result, files []File) (queue int64) {
	for sig, t := range r.Signals {
		t.Accepted, t.Refused = 0, 0
		for i, f := range files {
			if f.Signal != sig {
				continue
			}
			id := fileReceiverID(i)
			t.Accepted += m.Of(selfmetrics.ReceiverAccepted, sig, id)
			t.Refused += m.Of(selfmetrics.ReceiverRefused, sig, id) + m.Of(selfmetrics.ReceiverFailed, sig, id)
		}
		t.Sent = m.Of(selfmetrics.ExporterSent, sig, render.BackendExporter)
		t.SendFailed = m.Of(selfmetrics.ExporterSendFailed, sig, render.BackendExporter)
		t.EnqueueFailed = m.Of(selfmetrics.ExporterEnqueueFailed, sig, render.BackendExporter)
	}
	return m.QueueSize(render.BackendExporter)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startCollector starts the collector in its own process group, its output
// appended to logPath, killed (SIGKILL) if this process dies first.
func startCollector(binary, cfgPath, logPath string, env []string) (*proc.Child, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(binary, "--config", cfgPath)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("--binary: starting the collector %s: %w", binary, err)
	}
	return proc.Watch(cmd), nil
}

// killCollector SIGKILLs the collector's group and waits for its exit
// (idempotent).
func killCollector(c *proc.Child) {
	if c.Running() {
		c.KillGroup()
		<-c.Exited()
	}
}

// collectorStatus is the status in dir/state.json ("" when there is none
// or it is not a state).
func collectorStatus(dir string) string {
	st, err := jobdir.ReadState(dir)
	if err != nil {
		return ""
	}
	return st.Status
}

// tail returns the last n lines of path, each cut to 400 bytes.
func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > 400 {
			lines[i] = l[:400] + "..."
		}
	}
	return strings.Join(lines, "\n")
}
