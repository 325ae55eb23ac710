// Command blackhole is a misbehaving backend for tests.
//
//	--mode hang (default): accept TCP connections, read and discard whatever
//	                       arrives, never answer (a hung OTLP backend).
//	--mode 401:            answer every HTTP request with 401 Unauthorized.
//
// Both exit cleanly on SIGTERM/SIGINT, closing all held connections.
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
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
	mode := flag.String("mode", "hang", `"hang" (accept, never answer) or "401" (HTTP 401 to everything)`)
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

	switch *mode {
	case "hang":
		hang(ctx, ln)
	case "401":
		srv := &http.Server{
			ReadHeaderTimeout: 10 * time.Second,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("WWW-Authenticate", `Bearer realm="blackhole"`)
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
			}),
		}
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Fatal(err)
		}
	default:
		log.Fatalf("unknown --mode %q", *mode)
	}
	log.Printf("stopped")
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
