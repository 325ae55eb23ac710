// Command blackhole is a misbehaving backend for tests.
//
//	--mode hang (default): accept TCP connections, read and discard whatever
//	                       arrives, never answer (a hung OTLP backend).
//	--mode 401:            answer every HTTP request with 401 Unauthorized.
//	--mode 429, --mode 503: answer every HTTP request with that status and
//	                       Retry-After: <--retry-after seconds> (a
//	                       throttling or overloaded backend).
//	--mode slow:           hold every request for --delay, then pass it to
//	                       --upstream (a real backend) and return its answer;
//	                       without --upstream answer 200 with an empty
//	                       OTLP response (a backend that takes seconds per
//	                       request).
//
// Every mode exits cleanly on SIGTERM/SIGINT, closing all held connections.
package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func main() {
	port := flag.Int("port", 4318, "TCP port to listen on")
	listen := flag.String("listen", "127.0.0.1", "address to bind")
	mode := flag.String("mode", "hang", `"hang" (accept, never answer), "401", "429", "503" (that status to everything) or "slow"`)
	retryAfter := flag.Int("retry-after", 2, "Retry-After seconds of --mode 429/503")
	delay := flag.Duration("delay", 3*time.Second, "how long --mode slow holds each request")
	upstream := flag.String("upstream", "", "--mode slow: the backend URL requests go to after the delay")
	flag.Parse()
	log.SetPrefix("blackhole: ")
	log.SetFlags(0)

	addr := net.JoinHostPort(*listen, strconv.Itoa(*port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Printf("mode %s on %s (pid %d)", *mode, ln.Addr(), os.Getpid())

	var handler http.Handler
	switch *mode {
	case "hang":
		hang(ctx, ln)
	case "401":
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("WWW-Authenticate", `Bearer realm="blackhole"`)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
		})
	case "429", "503":
		code, _ := strconv.Atoi(*mode)
		if *retryAfter < 0 {
			log.Fatalf("--retry-after %d: want 0 or more seconds", *retryAfter)
		}
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Retry-After", strconv.Itoa(*retryAfter))
			http.Error(w, http.StatusText(code), code)
		})
	case "slow":
		if *delay <= 0 {
			log.Fatalf("--delay %v: want a positive duration", *delay)
		}
		handler = slow(ctx, *delay, *upstream)
	default:
		log.Fatalf("unknown --mode %q", *mode)
	}
	if handler != nil {
		serve(ctx, ln, handler)
	}
	log.Printf("stopped")
}

// serve answers HTTP on ln with h until ctx ends.
func serve(ctx context.Context, ln net.Listener, h http.Handler) {
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: h}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// slow holds each request for delay (or until ctx ends), then proxies it
// to upstream, or answers 200 with an empty body (an empty
// Export*ServiceResponse) when upstream is "".
func slow(ctx context.Context, delay time.Duration, upstream string) http.Handler {
	var proxy *httputil.ReverseProxy
	if upstream != "" {
		u, err := url.Parse(upstream)
		if err != nil || u.Scheme == "" || u.Host == "" {
			log.Fatalf("--upstream %q: want a URL such as http://127.0.0.1:4318", upstream)
		}
		proxy = httputil.NewSingleHostReverseProxy(u)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		case <-ctx.Done():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		if proxy == nil {
			w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusOK)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		proxy.ServeHTTP(w, r)
	})
}

func hang(ctx context.Context, ln net.Listener) {
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	go func() {
		<-ctx.Done()
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Printf("accept: %v", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		go func() {
			_, _ = io.Copy(io.Discard, c) // never write anything back
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
			c.Close()
		}()
	}
}
