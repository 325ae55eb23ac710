package supervise

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// File delivery (otel.delivery: files). The collector writes only the
// job's files; the supervisor sends them to the backend from the
// checkpoint beside the receipt (helper/delivery), for the job's life and
// at the drain:
//
//   - while the job runs, a sender goroutine delivers every complete line
//     past the checkpoint, looks again every delivery.DefaultPoll, and
//     retries a failing backend (doubling from 1 s to RetryMax, Retry-After
//     honoured) until it answers: an outage of any length is caught up
//     from the files by itself, in order, at otel.delivery_rate_cap items
//     per second. The live latency to the backend is the file exporter's
//     flush (at most 1 s), the poll (at most 250 ms) and the request.
//   - at the drain, once the collector has exited and the supervisor's own
//     lines are appended, the sender finishes its pass and makes one more
//     to the files' end, within what is left of the epilog's wait for the
//     drain (DrainWait less timing.SupervisorSlack - timing.DeliveryBound for the
//     receipt and the state); what is still
//     past the checkpoint then is what `replay DIR` sends.
//   - outages are noted as they are seen (a failed attempt, the next
//     answer, the pass that found nothing left) with the items
//     acknowledged meanwhile, for the receipt (receipt.CatchUp).
//
// Its memory is one request at a time (at most delivery.DefaultMaxBatchBytes
// of JSON and its gzip copy) and a 1 MiB read buffer: a few MiB beside the
// collector, outside the collector's memory limit.

// RetryMax is the longest wait between two attempts of a request to a
// failing backend: a backend back from an outage gets its first request
// within it (measured with 30 s: the catch-up began 15 s after the
// backend's return), at the cost of one request per RetryMax to a backend
// that stays down.
const RetryMax = 5 * time.Second

// fileSender is the supervisor's delivery of the files.
type fileSender struct {
	opt    delivery.Options
	stop   chan struct{} // closed at the drain: finish the pass, one more, return
	done   chan struct{} // closed when the goroutine has returned
	cancel context.CancelFunc
	log    func(string, ...any)

	mu       sync.Mutex
	catchUps []receipt.CatchUp
	open     bool  // the last catch-up is not caught up yet
	ackBase  int64 // the checkpoint's accepted items at the outage's start
	lastErr  error
	failing  bool // the last attempt failed
	readBase func() int64
}

// startFileDelivery starts the sender for the held output dir when the
// job's delivery is "files" and a backend is configured; nil otherwise.
func (s *supervisor) startFileDelivery() *fileSender {
	if !s.o.FileDelivery() || s.o.Endpoint == "" || s.base() == "" {
		return nil
	}
	dir := s.base()
	fs := &fileSender{stop: make(chan struct{}), done: make(chan struct{}), log: s.log.Warnf}
	fs.readBase = func() int64 {
		cp, err := delivery.ReadCheckpoint(dir)
		if err != nil {
			return 0
		}
		return delivery.Totals(cp, nil).Accepted
	}
	timeout := time.Duration(s.o.ExportTimeoutSeconds) * time.Second
	base := http.DefaultTransport.(*http.Transport).Clone()
	fs.opt = s.backendRequests(timeout)
	fs.opt.Dir, fs.opt.Signals, fs.opt.RateCap = dir, s.signals(), float64(s.o.RateCap())
	fs.opt.Retry = delivery.Retry{Initial: time.Second, Max: RetryMax}
	fs.opt.Client = &http.Client{Timeout: timeout, Transport: &watchTransport{base: base, fs: fs}}
	ctx, cancel := context.WithCancel(context.Background())
	fs.cancel = cancel
	go fs.run(ctx)
	s.log.Infof("delivery: the job's files go to the backend %s from the checkpoint %s (rate cap %d items/s)", s.o.Endpoint, delivery.CheckpointFile, s.o.RateCap())
	return fs
}

// backendRequests are the job's requests to its backend, as the
// collector's backend exporter would make them: the endpoint, the backend
// token as a bearer header, gzip, timeout per request, and with
// otel.token_resource_attribute the token as a resource attribute too (as
// the collector's resource/backend_auth on its backend pipelines,
// render.BackendAuth: never in the files). The files' sender and the
// drain's delivery (deliver) both send with them.
func (s *supervisor) backendRequests(timeout time.Duration) delivery.Options {
	bearer := "Bearer " + s.opt.Token
	opt := delivery.Options{
		Endpoint: s.o.Endpoint, Headers: map[string]string{"Authorization": bearer},
		Compression: "gzip", Timeout: timeout,
	}
	if s.o.TokenResourceAttribute {
		opt.ResourceAttributes = map[string]string{"Authorization": bearer}
	}
	return opt
}

// pass is one delivery pass to the files' end; when it answered every
// complete line after an outage, the outage is caught up. It returns the
// pass's error (also kept for the receipt).
func (fs *fileSender) pass(ctx context.Context) error {
	_, err := delivery.Run(ctx, fs.opt)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.lastErr = err
	if err == nil && fs.open && !fs.failing {
		c := &fs.catchUps[len(fs.catchUps)-1]
		c.CaughtUp = time.Now()
		c.Items = fs.readBase() - fs.ackBase
		fs.open = false
	}
	return err
}

// run delivers until stop is closed (then once more to the files' end) or
// ctx ends.
func (fs *fileSender) run(ctx context.Context) {
	defer close(fs.done)
	release := fs.lock(ctx)
	defer release()
	if ctx.Err() != nil {
		return
	}
	logged := ""
	for {
		err := fs.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := delivery.DefaultPoll
		if err != nil {
			// A configuration error (the token, the path) or a file
			// that cannot be read: said once, tried again later.
			if err.Error() != logged {
				fs.log("delivery: %v; trying again every 30 s", err)
				logged = err.Error()
			}
			wait = 30 * time.Second
		}
		select {
		case <-fs.stop:
			fs.pass(ctx)
			return
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// lock takes the node dir's delivery lock (delivery.Lock) for the
// sender's life, so that a `replay` of the dir refuses while the job's
// own delivery runs. While a replay holds it, the sender waits (looking
// every second) until the replay ends or ctx does; on a file system
// without flock(2) it delivers without the lock (said once: a replay then
// only warns from state.json). It returns the release.
func (fs *fileSender) lock(ctx context.Context) func() {
	said := false
	for {
		release, err := delivery.Lock(fs.opt.Dir)
		var locked *delivery.LockedError
		switch {
		case err == nil:
			if said {
				fs.log("delivery: the replay holding %s ended: delivering from the checkpoint", delivery.LockFile)
			}
			return release
		case errors.As(err, &locked):
			if !said {
				fs.log("delivery: another process (a replay) holds %s: delivering once it ends", delivery.LockFile)
				said = true
			}
		default:
			fs.log("delivery: %v; delivering without the lock (a replay of this dir cannot tell that this delivery runs)", err)
			return func() {}
		}
		select {
		case <-ctx.Done():
			return func() {}
		case <-time.After(time.Second):
		}
	}
}

// finish ends the sender within bound: its pass and one more to the
// files' end, then it is stopped where it is (a request in flight is
// counted as a possible duplicate by the next sender).
func (fs *fileSender) finish(bound time.Duration) {
	close(fs.stop)
	select {
	case <-fs.done:
	case <-time.After(bound):
		fs.cancel()
		<-fs.done
	}
	fs.cancel()
}

// note records one attempt's outcome (watchTransport): the start of an
// outage at a failure, the backend's next answer.
func (fs *fileSender) note(failed bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	now := time.Now()
	switch {
	case failed && !fs.failing:
		fs.failing = true
		if !fs.open {
			fs.catchUps = append(fs.catchUps, receipt.CatchUp{From: now})
			fs.open = true
			fs.ackBase = fs.readBase()
		}
	case !failed && fs.failing:
		fs.failing = false
		if fs.open {
			c := &fs.catchUps[len(fs.catchUps)-1]
			if c.Answered.IsZero() {
				c.Answered = now
			}
		}
	}
}

// watchTransport tells the sender each attempt's outcome: failed when no
// answer came or the backend answered 429 or 5xx (what is retried).
type watchTransport struct {
	base http.RoundTripper
	fs   *fileSender
}

func (w *watchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(r)
	if errors.Is(r.Context().Err(), context.Canceled) {
		return resp, err // stopped by the supervisor: no outcome
	}
	w.fs.note(err != nil || resp.StatusCode == 429 || resp.StatusCode >= 500)
	return resp, err
}

// receipt is the delivery's section of the receipt: the checkpoint's
// totals, what lies past it, the outages seen. nil without a sender.
func (fs *fileSender) receipt() *receipt.Delivery {
	if fs == nil {
		return nil
	}
	cp, err := delivery.ReadCheckpoint(fs.opt.Dir)
	if err != nil {
		return &receipt.Delivery{Error: err.Error()}
	}
	bl, err := delivery.Backlogs(fs.opt.Dir)
	d := delivery.Totals(cp, bl)
	if err != nil {
		d.Error = err.Error()
	}
	fs.mu.Lock()
	d.CatchUps = append(d.CatchUps, fs.catchUps...)
	if fs.open && len(d.CatchUps) > 0 {
		d.CatchUps[len(d.CatchUps)-1].Items = fs.readBase() - fs.ackBase
	}
	if d.Backlog > 0 && fs.lastErr != nil && d.Error == "" {
		d.Error = oneLine(fs.lastErr.Error())
		if errors.Is(fs.lastErr, context.Canceled) {
			d.Error = "the drain's bound ran out before the backend answered for every line"
		}
	}
	fs.mu.Unlock()
	return &d
}

// finishFileDelivery ends the sender at the drain within bound and marks
// the appended lines (receipt.Appended) the backend answered for as
// delivered; the others wait for `replay DIR`.
func (s *supervisor) finishFileDelivery(bound time.Duration) {
	fs := s.files
	if fs == nil {
		return
	}
	start := time.Now()
	fs.finish(max(bound, 0))
	d := fs.receipt()
	cp, _ := delivery.ReadCheckpoint(fs.opt.Dir)
	for i := range s.appended {
		a := &s.appended[i]
		a.Delivered, a.HTTPStatus, a.Cause = false, 0, "past the delivery checkpoint: `gym-otel-spank replay DIR` sends it"
		if cp != nil {
			if p := cp.Files[a.File]; p != nil && p.Offset >= a.Offset+a.Length {
				a.Delivered, a.Cause = true, ""
			}
		}
	}
	if d.Complete() {
		s.log.Infof("delivery: the backend answered for every line of the files (%d items, at most %d duplicates) within %d ms of the collector's exit",
			d.Accepted, d.DuplicatesBound, time.Since(start).Milliseconds())
		return
	}
	msg := fmt.Sprintf("delivery: %d items (%d lines) past the checkpoint are not acknowledged by the backend at the drain (%s): `gym-otel-spank replay %s` sends exactly those", d.Backlog, d.BacklogLines, d.Error, s.out)
	s.log.Warn(msg)
	appendLog(s.logPath, "gym-otel: "+msg)
}
