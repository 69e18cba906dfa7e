// Command hello is the example web app of the Flotilla examples: it says which pod and host
// answered, so Service load balancing and rollouts can be watched with curl.
//
// GET / answers "hello from <POD_NAME> on <NODE_NAME> version <VERSION>"; GET /healthz answers
// 200. It listens on $PORT (default 8080) and shuts down gracefully on SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// version is the default of $VERSION, stamped at build time with -ldflags "-X main.version=v2".
var version = "v1"

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func handler(pod, node, ver string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "hello from %s on %s version %s\n", pod, node, ver)
	})
	return mux
}

func main() {
	pod := env("POD_NAME", "unknown-pod")
	node := env("NODE_NAME", "unknown-node")
	ver := env("VERSION", version)
	addr := ":" + env("PORT", "8080")
	srv := &http.Server{Addr: addr, Handler: handler(pod, node, ver), ReadHeaderTimeout: 10 * time.Second}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Printf("hello %s listening on %s (pod %s, node %s)", ver, addr, pod, node)

	select {
	case err := <-errc:
		log.Fatalf("serve: %v", err)
	case s := <-sigs:
		if s == syscall.SIGTERM {
			fmt.Println("SIGTERM received")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("shutdown: %v", err)
		}
		log.Print("stopped")
	}
}
