// Package delivery sends a node dir's jsonl files (each line one OTLP
// export request in OTLP-JSON, as the collector's file exporter writes
// them) to the site's backend as OTLP/HTTP JSON requests, from a
// checkpointed position: the backend's copy of a run follows from the
// job's files.
//
// # What it does
//
// For each of traces.jsonl, metrics.jsonl and logs.jsonl it reads the
// complete lines past the checkpoint's offset (a last line without its
// newline is the file exporter's flush in progress: left for the next
// pass), joins consecutive lines into one export request (their resource
// arrays, in file order, up to MaxBatchItems items and MaxBatchBytes
// bytes) and POSTs it to <endpoint>/v1/<signal> with Content-Type
// application/json, the headers the caller gives (the bearer token read
// from the environment: TokenHeaders) and the rendered compression
// (gzip at its fastest level, or none). The backend's answer decides:
//
//   - 2xx: the request's items are acknowledged; a partial success's
//     rejected count is counted as Rejected and never sent again. The
//     offset moves past the request's lines and the checkpoint
//     (CheckpointFile, beside receipt.json) is written whole.
//   - 429, 502, 503, 504, a timeout, a refused or reset connection: the
//     same request again after a backoff (Retry: doubling from Initial up
//     to Max, with jitter; a Retry-After of the backend's is honoured up
//     to Max), until MaxElapsed (0: until the context ends). An attempt
//     whose outcome is unknown (a timeout, or a connection that failed
//     after the request was written) adds the request's items to
//     DuplicatesBound: the backend may have stored them (OTLP has no
//     idempotency), so the backend holds at most that many items twice.
//     A connection that was never made adds nothing. The request a sender
//     had in flight when it died or was stopped is in the checkpoint
//     (Position.InFlight, written before each attempt) and the next
//     sender adds it. A request of more than one line that timed out is
//     not sent again whole: its lines go again in requests of half its
//     size (down to one line), and the size doubles back after each
//     request the backend answers within half the timeout: a backend
//     slower than the timeout for a full request (a slow proxy, a loaded
//     collector) still advances, where the same request would time out
//     again and again.
//   - 401, 403, 404, 405: a configuration error (the token, the
//     endpoint's path): delivery stops with an error naming the status,
//     the offset stays, and what is left is what a later delivery or
//     `replay` sends.
//   - any other status (400, 413, 500, ...): OTLP says not to retry it:
//     the request's items are counted as Rejected and the offset moves
//     on.
//
// A per-node rate cap (items per second over all files, a token bucket
// with a burst of one second's items) keeps a catch-up after an outage
// from starving the job's live data and from flooding a backend that
// many nodes reach again at once: N nodes send at most N × RateCap items
// per second between them (a request holds at most RateCap items).
// Memory is one request and its compressed copy at a time (MaxBatchBytes,
// or one line of at most MaxLine); the only file written is the
// checkpoint, a few hundred bytes in the node dir.
//
// Backlogs counts what lies past the checkpoint in each file: what the
// backend has not acknowledged, which a later delivery or `replay` sends.
// A file truncated below the offset, or replaced by another (its device,
// inode and a hash of its first 4 KiB are in the checkpoint), is an
// error, never a position.
//
// # How it replaces the collector's live export (otel.delivery: files)
//
// With otel.delivery: collector the collector's otlp_http/backend
// exporter sends live and drops what its sending queue cannot hold during
// an outage (counted in the receipt); the files keep everything. With
// delivery from the files (the default), the supervisor renders no
// backend exporter: the collector writes only the files
// (file exporter, flush_interval 1 s) and the supervisor runs Run with
// Follow for the job's life, polling every Poll (250 ms) past the last
// complete line. The live latency to the backend becomes the file
// exporter's flush (at most 1 s) plus the poll (at most Poll) plus the
// request's round trip; an outage of any length is caught up from the
// checkpoint, in order, at RateCap. At the drain the supervisor cancels
// the follower once the collector has exited and the lines it appends
// after the exit are in the files, then runs one more pass bounded by
// what is left of the epilog's wait for the drain; the receipt gains
// the checkpoint's figures (acknowledged, rejected, duplicates bound,
// when caught up) and what is still past the offset. A supervisor that
// was killed and restarted (or a later link of a chain sharing the dir)
// continues from the checkpoint: only the request in flight at the kill
// can reach the backend twice, and the next delivery counts its items in
// DuplicatesBound (Position.InFlight). The token stays in the
// supervisor's memory and the collector's environment only, as before.
// Wired as otel.delivery: files, the default (helper/supervise/filedelivery.go;
// otel.delivery: collector keeps the collector's exporter). A job with
// otel.token_resource_attribute has the token upserted as the
// Authorization resource attribute on every resource sent
// (Options.ResourceAttributes; the files never hold it), as the
// collector's backend pipelines do, and the checkpoint names the
// attribute so that replay adds it too. The
// collector's exporter reads HTTPS_PROXY/NO_PROXY as net/http does (the
// default transport here does the same), and the rendered exporter has no
// TLS settings of its own to carry over; the rate cap is otel.delivery_rate_cap,
// with the arithmetic for N nodes in the admin guide (N × cap items
// per second at the backend after one second's burst, TestRateCap).
//
// # How replay uses the checkpoint
//
// `replay` by default sends, of each node dir, exactly the lines past the
// checkpoint's offset, with this package instead of a collector of its
// own, and advances the same checkpoint: a replay interrupted or run
// twice sends nothing twice. A node dir without a checkpoint falls back
// to the receipt's plan (helper/replay/plan.go). `--all` resets nothing:
// it sends every line again and says how many the checkpoint counts as
// acknowledged already (the duplicates it causes).
package delivery

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Defaults of Options.
const (
	// DefaultRateCap is the per-node rate cap, items per second.
	DefaultRateCap = 20000
	// DefaultTimeout bounds one request.
	DefaultTimeout = 5 * time.Second
	// DefaultPoll is how often Follow looks for new lines.
	DefaultPoll = 250 * time.Millisecond
	// MaxLine bounds one line, bytes: a longer one is an error (the
	// collector's batches are far smaller).
	MaxLine = 64 << 20
	// DefaultMaxBatchItems and DefaultMaxBatchBytes bound one request
	// (the batch processor's default batch, and well below the 20 MiB a
	// collector's OTLP/HTTP receiver accepts by default).
	DefaultMaxBatchItems = 8192
	DefaultMaxBatchBytes = 4 << 20
	// DefaultMinSplitItems is Options.MinSplitItems' default.
	DefaultMinSplitItems = 256
)

// Signals are the signals delivered, in the order of each pass.
var Signals = []string{"traces", "metrics", "logs"}

// Retry is the backoff between attempts of one line.
type Retry struct {
	// Initial is the first wait (0: 1 s); Max the longest (0: 30 s).
	Initial, Max time.Duration
	// MaxElapsed bounds the attempts of one line (0: until the context
	// ends): past it, Run returns an error and the offset stays.
	MaxElapsed time.Duration
}

// Options configure Run.
type Options struct {
	// Dir is the node dir: its jsonl files and its checkpoint.
	Dir string
	// Signals are the files to deliver (nil: Signals).
	Signals []string
	// Endpoint is the backend's OTLP/HTTP base URL (http:// or https://);
	// requests go to Endpoint + "/v1/<signal>".
	Endpoint string
	// Headers are sent with every request (TokenHeaders: the bearer
	// token).
	Headers map[string]string
	// Compression is "gzip" or "none" ("" : none), as the job's
	// rendered exporter has it.
	Compression string
	// Timeout bounds one request (0: DefaultTimeout).
	Timeout time.Duration
	// RateCap is this node's cap, items per second over every file (0:
	// DefaultRateCap; negative: none).
	RateCap float64
	// Retry is the backoff.
	Retry Retry
	// Follow keeps delivering new lines as they are written, looking
	// every Poll (0: DefaultPoll), until ctx ends; without it Run returns
	// once every complete line was answered.
	Follow bool
	Poll   time.Duration
	// MaxBatchItems and MaxBatchBytes bound one request: consecutive
	// lines of a file are joined into one export request while it stays
	// within both (0: DefaultMaxBatchItems, DefaultMaxBatchBytes; the
	// items never more than RateCap, one second's burst); a line larger
	// than either goes alone.
	MaxBatchItems int64
	MaxBatchBytes int
	// MinSplitItems is the smallest request a timeout splits (0:
	// DefaultMinSplitItems): a smaller one that timed out is sent again
	// whole (a hung backend, not one too slow for the request's size).
	MinSplitItems int64
	// Client sends the requests (nil: one with Timeout).
	Client *http.Client
	// ResourceAttributes are upserted as string attributes on every
	// resource sent (never written to the files): with
	// otel.token_resource_attribute, {"Authorization": "Bearer <token>"},
	// as the collector's resource/backend_auth processor does on its
	// backend pipelines (render.BackendAuth). nil: the lines as they are.
	ResourceAttributes map[string]string
}

// Stats are what one Run did, per file name (this run only; the
// checkpoint holds the totals).
type Stats struct {
	Files map[string]*Position
}

// Total sums the stats over the files.
func (s *Stats) Total() Position {
	var t Position
	for _, p := range s.Files {
		t.Lines += p.Lines
		t.BadLines += p.BadLines
		t.Items += p.Items
		t.Accepted += p.Accepted
		t.Rejected += p.Rejected
		t.Requests += p.Requests
		t.Retries += p.Retries
		t.DuplicatesBound += p.DuplicatesBound
	}
	return t
}

// ConfigError is a backend's answer that no retry changes (401, 403, 404,
// 405): the token or the endpoint is wrong. The offset stays.
type ConfigError struct {
	Status int
	URL    string
	Body   string
}

func (e *ConfigError) Error() string {
	hint := "check the endpoint's path"
	if e.Status == 401 || e.Status == 403 {
		hint = "check the bearer token (its variable) and its rights on this backend"
	}
	return fmt.Sprintf("the backend answered %d %s to %s (%s); nothing past the checkpoint was acknowledged: %s",
		e.Status, http.StatusText(e.Status), e.URL, strings.TrimSpace(e.Body), hint)
}

// TokenHeaders is the Authorization header of the bearer token in the
// variable tokenEnv, read with lookup (nil: os.LookupEnv). Errors name the
// variable: unset or empty.
func TokenHeaders(tokenEnv string, lookup func(string) (string, bool)) (map[string]string, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	tok, ok := lookup(tokenEnv)
	if !ok || tok == "" {
		return nil, fmt.Errorf("otel.token_env: the variable %s is not set or empty", tokenEnv)
	}
	return map[string]string{"Authorization": "Bearer " + tok}, nil
}

// Run delivers opt.Dir's files from its checkpoint (see the package
// doc). It returns this run's stats and an error when the options are
// wrong (naming the field), the checkpoint or a file cannot be read or
// was replaced under it, the backend answered a ConfigError, a line's
// retries passed Retry.MaxElapsed, or ctx ended (ctx.Err(); with Follow
// that is how it ends).
func Run(ctx context.Context, opt Options) (*Stats, error) {
	d, err := newDeliverer(opt)
	if err != nil {
		return nil, err
	}
	for {
		progressed := false
		for _, sig := range d.opt.Signals {
			n, err := d.file(ctx, sig, turnBatches)
			if err != nil {
				return d.stats, err
			}
			progressed = progressed || n > 0
		}
		if progressed {
			continue
		}
		if !d.opt.Follow {
			return d.stats, nil
		}
		select {
		case <-ctx.Done():
			return d.stats, ctx.Err()
		case <-time.After(d.opt.Poll):
		}
	}
}

// turnBatches is how many requests one file sends before the next file's
// turn: a long backlog of one signal (under the rate cap, a request is up
// to a second's items) does not hold the others' new lines back.
const turnBatches = 1

type deliverer struct {
	opt    Options
	cp     *Checkpoint
	stats  *Stats
	bucket *bucket
	// maxItems and maxBytes bound the next request (at most
	// Options.MaxBatchItems and MaxBatchBytes): halved when a request of
	// more than one line timed out, doubled back after each request the
	// backend answered within half the timeout, but for SplitHold after a
	// timeout below the size that timed out (timedOut items, timedOutBytes).
	maxItems, maxBytes      int64
	timedOut, timedOutBytes int64
	splitAt                 time.Time
	// lastRTT is the duration of the last answered attempt.
	lastRTT time.Duration
	// lineItems is the items of the line sendInParts sends in parts (0:
	// none): what the checkpoint counts in flight until it is answered.
	lineItems int64
}

// errSplit is send's answer when an attempt of a request of more than
// one line timed out: the request is sent again in smaller parts. A
// backend that takes longer than the timeout for a request of the full
// size (slow, or loaded) would otherwise get the same request again and
// again, time out each time, and never advance.
var errSplit = errors.New("the request timed out: sending it in smaller parts")

// SplitHold is how long after a request timed out the requests stay
// smaller than it: a slow backend costs one timeout per SplitHold once
// the size that it answers in time is found, not one per growth.
const SplitHold = time.Minute

func newDeliverer(opt Options) (*deliverer, error) {
	if err := opt.checkWire(); err != nil {
		return nil, err
	}
	if opt.Signals == nil {
		opt.Signals = Signals
	}
	for _, s := range opt.Signals {
		if s != "traces" && s != "metrics" && s != "logs" {
			return nil, fmt.Errorf("signal %q: not traces, metrics or logs", s)
		}
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Poll <= 0 {
		opt.Poll = DefaultPoll
	}
	if opt.RateCap == 0 {
		opt.RateCap = DefaultRateCap
	}
	if opt.Retry.Initial <= 0 {
		opt.Retry.Initial = time.Second
	}
	if opt.Retry.Max <= 0 {
		opt.Retry.Max = 30 * time.Second
	}
	opt.client()
	if opt.MaxBatchItems <= 0 {
		opt.MaxBatchItems = DefaultMaxBatchItems
	}
	if opt.RateCap > 0 {
		opt.MaxBatchItems = max(1, min(opt.MaxBatchItems, int64(opt.RateCap)))
	}
	if opt.MaxBatchBytes <= 0 {
		opt.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if opt.MinSplitItems <= 0 {
		opt.MinSplitItems = DefaultMinSplitItems
	}
	cp, err := ReadCheckpoint(opt.Dir)
	if err != nil {
		return nil, err
	}
	for k := range opt.ResourceAttributes {
		if !slices.Contains(cp.ResourceAttributes, k) {
			cp.ResourceAttributes = append(cp.ResourceAttributes, k)
		}
	}
	slices.Sort(cp.ResourceAttributes)
	stats := &Stats{Files: map[string]*Position{}}
	for name, p := range cp.Files {
		if p.InFlight > 0 {
			// The previous sender's request without an answer: its lines
			// are past the offset and go again.
			p.DuplicatesBound += p.InFlight
			stats.Files[name] = &Position{DuplicatesBound: p.InFlight}
			p.InFlight = 0
		}
	}
	return &deliverer{opt: opt, cp: cp, stats: stats, bucket: newBucket(opt.RateCap),
		maxItems: opt.MaxBatchItems, maxBytes: int64(opt.MaxBatchBytes)}, nil
}

// checkWire checks what a request needs of the options: the endpoint
// and the compression. Errors name the field and its value.
func (o *Options) checkWire() error {
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("endpoint %q: not an http:// or https:// URL with a host", o.Endpoint)
	}
	switch o.Compression {
	case "", "none", "gzip":
	default:
		return fmt.Errorf("compression %q: delivery sends gzip or none", o.Compression)
	}
	return nil
}

// client sets Client, when nil, to one bounded by Timeout.
func (o *Options) client() {
	if o.Client == nil {
		o.Client = &http.Client{Timeout: o.Timeout}
	}
}

// file delivers the complete lines of one signal's file past its offset,
// in at most turns requests, and returns how many lines it answered for.
func (d *deliverer) file(ctx context.Context, sig string, turns int) (int64, error) {
	name := sig + ".jsonl"
	path := filepath.Join(d.opt.Dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	pos := d.cp.position(name)
	fi, st, err := checkFile(f, path, pos)
	if err != nil {
		return 0, err
	}
	pos.Dev, pos.Ino = uint64(st.Dev), st.Ino
	if fi.Size() == pos.Offset {
		return 0, nil
	}
	if _, err := f.Seek(pos.Offset, io.SeekStart); err != nil {
		return 0, err
	}
	run := d.stats.Files[name]
	if run == nil {
		run = &Position{}
		d.stats.Files[name] = run
	}
	r := bufio.NewReaderSize(f, 1<<20)
	var n int64
	var carry []byte
	for turn := 0; turn < turns; turn++ {
		b, next, err := d.nextBatch(r, sig, carry)
		carry = next
		if err != nil {
			return n, fmt.Errorf("%s at offset %d: %w", path, pos.Offset, err)
		}
		if b.lines == 0 {
			return n, nil // no complete line left
		}
		var acc, rej int64
		if b.items > 0 || len(b.parts) > 0 {
			if err := d.bucket.take(ctx, float64(b.items)); err != nil {
				return n, err
			}
			body := b.body(sig)
			if b.lines == 1 && b.items > d.maxItems {
				acc, rej, err = d.sendInParts(ctx, sig, body, b.items, pos, run)
			} else {
				acc, rej, err = d.send(ctx, sig, body, b.items, pos, run, b.items > d.opt.MinSplitItems)
				if errors.Is(err, errSplit) && b.lines == 1 {
					// One line: its items in smaller requests.
					d.shrink(b.items, b.bytes)
					pos.Retries++ // its first items go again
					run.Retries++
					acc, rej, err = d.sendInParts(ctx, sig, body, b.items, pos, run)
				}
			}
			if errors.Is(err, errSplit) {
				// The same lines again from the offset, in a request of
				// half the size (the same turn).
				d.shrink(b.items, b.bytes)
				pos.Retries++ // its first lines go again
				run.Retries++
				if err := d.cp.Write(d.opt.Dir); err != nil {
					return n, err
				}
				if _, err := f.Seek(pos.Offset, io.SeekStart); err != nil {
					return n, err
				}
				r.Reset(f)
				carry = nil
				turn--
				continue
			}
			if err != nil {
				if ctx.Err() == nil {
					// Answered, or its unknown outcome counted: nothing
					// is in flight.
					err = errors.Join(err, d.cp.Write(d.opt.Dir))
				}
				return n, err
			}
		}
		if pos.HeadLen < HeadMax {
			// The file's start, to tell it from a file written anew
			// under the same inode.
			pos.HeadLen = min(HeadMax, pos.Offset+b.bytes)
			if pos.Head, err = head(f, pos.HeadLen); err != nil {
				return n, err
			}
		}
		if err := d.advance(pos, run, b, acc, rej); err != nil {
			return n, err
		}
		if b.items > 0 && d.lastRTT < d.opt.Timeout/2 {
			items, size := d.opt.MaxBatchItems, int64(d.opt.MaxBatchBytes)
			if time.Since(d.splitAt) < SplitHold {
				items, size = max(1, d.timedOut-1), max(1, d.timedOutBytes-1)
			}
			d.maxItems = max(d.maxItems, min(2*d.maxItems, items))
			d.maxBytes = max(d.maxBytes, min(2*d.maxBytes, size))
		}
		n += b.lines
	}
	return n, nil
}

// shrink halves the requests after one of items (and size bytes) timed
// out, and keeps them below it for SplitHold.
func (d *deliverer) shrink(items, size int64) {
	d.maxItems, d.maxBytes = max(1, items/2), max(1, size/2)
	d.timedOut, d.timedOutBytes, d.splitAt = items, size, time.Now()
}

// sendInParts sends one line's request (body, of items) as requests of
// at most maxItems items each, in order, halving them again when one
// times out (splitRequest). It returns the items the backend accepted
// and rejected over the parts. Until the last part is answered the
// checkpoint counts the whole line in flight: the offset moves only past
// whole lines, so a sender stopped midway sends the line again, and the
// parts already answered may then reach the backend twice.
func (d *deliverer) sendInParts(ctx context.Context, sig string, body []byte, items int64, pos, run *Position) (acc, rej int64, err error) {
	parts, err := splitRequest(sig, body, d.maxItems)
	if err != nil {
		return 0, 0, fmt.Errorf("splitting a request of %d items: %w", items, err)
	}
	d.lineItems = items
	defer func() { d.lineItems = 0 }()
	for i := 0; i < len(parts); {
		p := parts[i]
		a, r, err := d.send(ctx, sig, p.body, p.items, pos, run, p.items > d.opt.MinSplitItems)
		if errors.Is(err, errSplit) {
			d.shrink(p.items, int64(len(p.body)))
			pos.Retries++
			run.Retries++
			sub, err := splitRequest(sig, p.body, d.maxItems)
			if err != nil {
				return acc, rej, err
			}
			parts = append(parts[:i], append(sub, parts[i+1:]...)...)
			continue
		}
		if err != nil {
			return acc, rej, err
		}
		acc += a
		rej += r
		i++
	}
	return acc, rej, nil
}

// batch is one request's worth of consecutive lines of a file.
type batch struct {
	// lines, bad and bytes count the lines (bad: not OTLP-JSON, not
	// sent) and their bytes; items the items of the good ones.
	lines, bad, bytes, items int64
	// parts are the good lines' resource arrays without their brackets.
	parts [][]byte
}

// resourceKeys are the top-level array of an export request by signal.
var resourceKeys = map[string]string{"traces": "resourceSpans", "metrics": "resourceMetrics", "logs": "resourceLogs"}

// body is the batch as one export request: the lines' resource arrays
// joined.
func (b *batch) body(sig string) []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"` + resourceKeys[sig] + `":[`)
	buf.Write(bytes.Join(b.parts, []byte(",")))
	buf.WriteString("]}")
	return buf.Bytes()
}

// nextBatch reads the next batch: complete lines (carry first, a line
// read but left out of the previous batch) while the batch stays within
// MaxBatchItems and MaxBatchBytes (its first line whatever its size).
// next is the line read that did not fit.
func (d *deliverer) nextBatch(r *bufio.Reader, sig string, carry []byte) (b batch, next []byte, err error) {
	for {
		line := carry
		carry = nil
		if line == nil {
			line, err = readLine(r)
			if err == io.EOF {
				return b, nil, nil
			}
			if err != nil {
				return b, nil, err
			}
		}
		items, part, ok := d.opt.linePart(sig, line)
		if b.lines > 0 && ok && (b.items+items > d.maxItems || b.bytes+int64(len(line)) > d.maxBytes) {
			return b, line, nil
		}
		b.lines++
		b.bytes += int64(len(line))
		if !ok {
			// Not OTLP-JSON (a write cut short): the file receiver skips
			// such lines too.
			b.bad++
			continue
		}
		b.items += items
		if len(part) > 0 {
			b.parts = append(b.parts, part)
		}
	}
}

// linePart reads one line of sig's file (its newline optional): its
// items, and its resource array's content (without brackets, empty for
// none) with ResourceAttributes upserted, as it goes into a request; ok
// is false when the line is not OTLP-JSON.
func (o *Options) linePart(sig string, line []byte) (items int64, part []byte, ok bool) {
	body := bytes.TrimRight(line, "\r\n")
	items, ok = countItems(sig, body)
	if ok {
		part, ok = resourceArray(body, resourceKeys[sig])
	}
	if ok && len(part) > 0 && len(o.ResourceAttributes) > 0 {
		part, ok = upsertResourceAttributes(part, o.ResourceAttributes)
	}
	return items, part, ok
}

// resourceArray is the content of the export request's top-level array
// key, without its brackets (empty for an empty array or none); ok is
// false when the line is not one JSON object.
func resourceArray(line []byte, key string) (part []byte, ok bool) {
	var top map[string]json.RawMessage
	if len(line) == 0 || json.Unmarshal(line, &top) != nil {
		return nil, false
	}
	raw := bytes.TrimSpace(top[key])
	if len(raw) < 2 || raw[0] != '[' {
		return nil, true
	}
	return bytes.TrimSpace(raw[1 : len(raw)-1]), true
}

// upsertResourceAttributes is part (a resource array's content without
// its brackets) with attrs upserted as string attributes on each
// resource's attributes, keys in sorted order after the resource's other
// attributes (an attribute of the same key is replaced). ok is false when
// part is not an array of JSON objects.
func upsertResourceAttributes(part []byte, attrs map[string]string) ([]byte, bool) {
	var rs []map[string]json.RawMessage
	if json.Unmarshal(append(append([]byte{'['}, part...), ']'), &rs) != nil {
		return nil, false
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, r := range rs {
		if r == nil {
			r = map[string]json.RawMessage{}
			rs[i] = r
		}
		var res map[string]json.RawMessage
		if raw := r["resource"]; len(raw) > 0 && json.Unmarshal(raw, &res) != nil {
			return nil, false
		}
		if res == nil {
			res = map[string]json.RawMessage{}
		}
		var kvs []json.RawMessage
		if raw := res["attributes"]; len(raw) > 0 && json.Unmarshal(raw, &kvs) != nil {
			return nil, false
		}
		kept := kvs[:0]
		for _, kv := range kvs {
			var k struct {
				Key string `json:"key"`
			}
			if json.Unmarshal(kv, &k) == nil {
				if _, ours := attrs[k.Key]; ours {
					continue
				}
			}
			kept = append(kept, kv)
		}
		for _, k := range keys {
			kv, _ := json.Marshal(map[string]any{"key": k, "value": map[string]string{"stringValue": attrs[k]}})
			kept = append(kept, kv)
		}
		res["attributes"], _ = json.Marshal(kept)
		r["resource"], _ = json.Marshal(res)
	}
	out, err := json.Marshal(rs)
	if err != nil {
		return nil, false
	}
	return out[1 : len(out)-1], true
}

// readLine is the next complete line with its newline; io.EOF when only
// part of a line (or nothing) is left.
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > MaxLine {
			return nil, fmt.Errorf("a line longer than %d bytes", MaxLine)
		}
		switch {
		case err == nil:
			return buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err // io.EOF: a partial line is left
		}
	}
}

// advance moves pos (and this run's figures) past a batch whose items
// the backend accepted (acc) or rejected (rej), and writes the
// checkpoint.
func (d *deliverer) advance(pos, run *Position, b batch, acc, rej int64) error {
	now := time.Now()
	for _, p := range []*Position{pos, run} {
		p.Offset += b.bytes
		p.Lines += b.lines
		p.BadLines += b.bad
		p.Items += acc + rej
		p.Accepted += acc
		p.Rejected += rej
		p.AckedAt = now
	}
	pos.InFlight = 0
	return d.cp.Write(d.opt.Dir)
}

// send sends one request until the backend answers for it: the items it
// accepted and rejected, or an error (ConfigError, MaxElapsed, ctx).
// Before each attempt the checkpoint is written with the request's items
// in flight (Position.InFlight); once an attempt is answered, or its
// unknown outcome is counted in DuplicatesBound, they are not. With
// split (a request larger than MinSplitItems), an attempt that timed out ends
// the attempts with errSplit (its items counted as possible duplicates):
// the caller sends the lines again in smaller requests.
func (d *deliverer) send(ctx context.Context, sig string, body []byte, items int64, pos, run *Position, split bool) (acc, rej int64, err error) {
	target, payload := d.opt.request(sig, body)
	start := time.Now()
	wait := d.opt.Retry.Initial
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			pos.Retries++
			run.Retries++
		}
		pos.Requests++
		run.Requests++
		pos.InFlight = max(items, d.lineItems)
		if err := d.cp.Write(d.opt.Dir); err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		status, respBody, after, unknown, err := d.opt.post(ctx, target, payload)
		if err == nil {
			pos.InFlight = 0
			d.lastRTT = time.Since(t0)
		}
		switch {
		case err == nil && status/100 == 2:
			n, _ := rejected(respBody)
			n = min(max(n, 0), items)
			return items - n, n, nil
		case err == nil && (status == 401 || status == 403 || status == 404 || status == 405):
			return 0, 0, &ConfigError{Status: status, URL: target, Body: string(respBody[:min(len(respBody), 200)])}
		case err == nil && status != 429 && status != 502 && status != 503 && status != 504:
			// Not retryable (OTLP/HTTP): refused for good.
			return 0, items, nil
		}
		if ctx.Err() != nil {
			// Stopped with the request in flight: InFlight stays in the
			// checkpoint for the next sender to count.
			return 0, 0, ctx.Err()
		}
		if unknown {
			// The backend may have stored what it did not answer for:
			// the next attempt may make duplicates.
			pos.DuplicatesBound += items
			run.DuplicatesBound += items
		}
		pos.InFlight = 0
		var ne net.Error
		if split && errors.As(err, &ne) && ne.Timeout() {
			return 0, 0, errSplit
		}
		w := wait/2 + rand.N(wait/2+1)
		if after > 0 {
			w = min(after, d.opt.Retry.Max)
		}
		if d.opt.Retry.MaxElapsed > 0 && time.Since(start)+w > d.opt.Retry.MaxElapsed {
			why := fmt.Sprintf("HTTP %d", status)
			if err != nil {
				why = err.Error()
			}
			return 0, 0, fmt.Errorf("%s: no answer that ends the retries within %v (last: %s); the offset stays for the next delivery", target, d.opt.Retry.MaxElapsed, why)
		}
		select {
		case <-ctx.Done():
			return 0, 0, errors.Join(ctx.Err(), d.cp.Write(d.opt.Dir))
		case <-time.After(w):
		}
		wait = min(2*wait, d.opt.Retry.Max)
	}
}

// request is the URL of signal's requests and body as sent (gzip at its
// fastest level when Compression says so).
func (o *Options) request(sig string, body []byte) (target string, payload []byte) {
	target = strings.TrimRight(o.Endpoint, "/") + "/v1/" + sig
	if o.Compression != "gzip" {
		return target, body
	}
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	zw.Write(body)
	zw.Close()
	return target, b.Bytes()
}

// post makes one request: the status and body of the backend's answer, or
// an error, and whether the backend may have stored a request it did not
// answer for (unknown: the connection was made and then failed or timed
// out). after is the answer's Retry-After.
func (o *Options) post(ctx context.Context, target string, payload []byte) (status int, body []byte, after time.Duration, unknown bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(payload))
	if err != nil {
		return 0, nil, 0, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	if o.Compression == "gzip" {
		req.Header.Set("Content-Encoding", "gzip")
	}
	for k, v := range o.Headers {
		req.Header.Set(k, v)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		var op *net.OpError
		dial := errors.As(err, &op) && op.Op == "dial"
		return 0, nil, 0, !dial, err
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		after = time.Duration(s) * time.Second
	}
	return resp.StatusCode, body, after, false, nil
}

// bucket is the rate cap: a token bucket of items per second with a
// burst of one second's items; a line larger than the burst waits for a
// full bucket and leaves it in debt.
type bucket struct {
	rate, tokens float64
	last         time.Time
}

func newBucket(rate float64) *bucket {
	if rate < 0 {
		return nil
	}
	return &bucket{rate: rate, tokens: rate, last: time.Now()}
}

func (b *bucket) take(ctx context.Context, n float64) error {
	if b == nil {
		return nil
	}
	now := time.Now()
	b.tokens = min(b.rate, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	need := min(n, b.rate)
	if b.tokens < need {
		w := time.Duration((need - b.tokens) / b.rate * float64(time.Second))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w):
		}
		b.tokens = need
		b.last = time.Now()
	}
	b.tokens -= n
	return nil
}
