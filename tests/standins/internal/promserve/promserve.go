// Package promserve holds the HTTP plumbing shared by the Prometheus
// stand-ins: a /metrics handler that always writes the classic text
// exposition format, a scrape log, and a server that exits cleanly on
// SIGTERM/SIGINT.
package promserve

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Handler returns a /metrics handler. before (may be nil) runs under a lock
// ahead of each gather, so it can advance counters; scrapeLog (may be "")
// receives one RFC3339Nano UTC timestamp line per scrape, written and closed
// before the response body so a reader sees it once the scrape completes.
func Handler(g prometheus.Gatherer, scrapeLog string, before func()) http.Handler {
	var mu sync.Mutex
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if before != nil {
			before()
		}
		mfs, err := g.Gather()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if scrapeLog != "" {
			if err := appendLine(scrapeLog, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
				log.Printf("scrape log: %v", err)
			}
		}
		w.Header().Set("Content-Type", string(format))
		enc := expfmt.NewEncoder(w, format)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				log.Printf("encode: %v", err)
				return
			}
		}
	})
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Serve listens on addr and serves h until SIGTERM or SIGINT, then shuts the
// server down and returns nil. A listen or serve error is returned.
func Serve(addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Printf("serving on http://%s (pid %d)", ln.Addr(), os.Getpid())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Printf("stopped on signal")
	return nil
}
