// Command toolbox is a small static multi-tool image for tests and debugging inside pods,
// where there is no shell: `toolbox <command> [args]`.
//
//	serve [PORT]            HTTP: / says pod and host, /healthz is 200 unless the file
//	                        /tmp/unhealthy exists, /exit/<code> ends the process
//	exit CODE [TEXT]        print TEXT (if any) and exit with CODE
//	alloc MIB               allocate and touch MIB MiB of memory, then sleep
//	fill FILE MIB           write MIB MiB to FILE, then sleep (exit 1 if a write fails)
//	lines COUNT [RATE]      print COUNT numbered 100-byte lines ("line N ....") at RATE a
//	                        second (default: at once), then sleep
//	signals FILE            sleep until SIGTERM, append "SIGTERM <unix nanos>" to FILE, exit 0
//	append FILE TEXT...     append a line to FILE (hooks, init containers)
//	touch FILE | rm FILE    create or remove a file
//	symlink TARGET LINK     make LINK a symlink to TARGET, replacing a file at LINK
//	exists FILE             exit 0 if FILE exists, else 1 (exec probes)
//	cat FILE...             print files
//	env                     print the environment
//	id                      print "uid=N gid=N groups=A,B" from the kernel (no /etc/passwd)
//	write FILE [TEXT]       create FILE holding TEXT, exit 1 if that fails (see security.go)
//	stat FILE...            print "FILE MODE UID GID" per file, MODE in octal
//	get URL                 HTTP GET, print the body, exit 1 on failure or non-2xx
//	dial HOST:PORT          TCP connect, exit 1 on failure
//	lookup NAME [TYPE]      DNS lookup through /etc/resolv.conf (A, SRV or CNAME)
//	sleep DURATION          sleep ("inf" for ever)
//	burn DURATION           keep one CPU busy for DURATION, then sleep until stopped
//	webhook [PORT]          HTTPS admission webhooks: /validate, /mutate, /slow (see apis.go)
//	apiserver PORT GROUP VERSION
//	                        HTTPS aggregated API serving flavours in GROUP/VERSION
//	kube list pods|secrets [NAMESPACE]
//	                        list as the pod's service account (in-cluster configuration; the
//	                        pod's own namespace by default), one name a line; the API's error
//	                        on stderr and exit 1 on failure (see kube.go)
//	kube watch-list pods|secrets NAMESPACE INTERVAL
//	                        list every INTERVAL for ever, printing "ok N" or "error: MESSAGE"
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: toolbox <command> [args]")
		os.Exit(2)
	}
	os.Exit(run(os.Args[1], os.Args[2:]))
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	return 1
}

func run(cmd string, args []string) int {
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	switch cmd {
	case "serve":
		return serve(arg(0))
	case "burn":
		d, err := time.ParseDuration(arg(0))
		if err != nil {
			return fail("burn DURATION: %v", err)
		}
		fmt.Printf("burning one CPU for %s\n", d)
		for end, x := time.Now().Add(d), 0; time.Now().Before(end); {
			for i := 0; i < 1_000_000; i++ {
				x += i
			}
			_ = x
		}
		fmt.Println("done burning")
		return run("sleep", []string{"inf"})
	case "webhook":
		return webhook(arg(0))
	case "apiserver":
		return apiserver(arg(0), arg(1), arg(2))
	case "kube":
		return kube(args)
	case "exit":
		code, _ := strconv.Atoi(arg(0))
		if t := strings.Join(args[min(1, len(args)):], " "); t != "" {
			fmt.Println(t)
		}
		return code
	case "alloc":
		mib, _ := strconv.Atoi(arg(0))
		buf := make([][]byte, 0, mib)
		for i := 0; i < mib; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				b[j] = byte(j)
			}
			buf = append(buf, b)
		}
		fmt.Printf("allocated %d MiB\n", len(buf))
		// A bare select{} is a deadlock to the Go runtime: sleep until stopped, holding buf.
		code := run("sleep", []string{"inf"})
		runtime.KeepAlive(buf)
		return code
	case "fill":
		return fill(arg(0), arg(1))
	case "lines":
		return lines(arg(0), arg(1))
	case "signals":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("waiting for SIGTERM")
		<-ch
		if err := appendLine(arg(0), fmt.Sprintf("SIGTERM %d", time.Now().UnixNano())); err != nil {
			return fail("%v", err)
		}
		fmt.Println("SIGTERM received")
		return 0
	case "append":
		if err := appendLine(arg(0), strings.Join(args[min(1, len(args)):], " ")); err != nil {
			return fail("%v", err)
		}
		return 0
	case "touch":
		if err := os.WriteFile(arg(0), nil, 0o644); err != nil {
			return fail("%v", err)
		}
		return 0
	case "symlink":
		if err := os.Remove(arg(1)); err != nil && !os.IsNotExist(err) {
			return fail("%v", err)
		}
		if err := os.Symlink(arg(0), arg(1)); err != nil {
			return fail("%v", err)
		}
		return 0
	case "rm":
		_ = os.Remove(arg(0))
		return 0
	case "exists":
		if _, err := os.Stat(arg(0)); err != nil {
			return 1
		}
		return 0
	case "cat":
		for _, f := range args {
			b, err := os.ReadFile(f)
			if err != nil {
				return fail("%v", err)
			}
			os.Stdout.Write(b)
		}
		return 0
	case "id":
		return id()
	case "write":
		return write(arg(0), strings.Join(args[min(1, len(args)):], " "))
	case "stat":
		return stat(args)
	case "env":
		for _, e := range os.Environ() {
			fmt.Println(e)
		}
		return 0
	case "get":
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(arg(0))
		if err != nil {
			return fail("%v", err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(os.Stdout, resp.Body)
		if resp.StatusCode/100 != 2 {
			return fail("HTTP %d", resp.StatusCode)
		}
		return 0
	case "dial":
		c, err := net.DialTimeout("tcp", arg(0), 5*time.Second)
		if err != nil {
			return fail("%v", err)
		}
		c.Close()
		fmt.Println("connected")
		return 0
	case "lookup":
		return lookup(arg(0), strings.ToUpper(arg(1)))
	case "sleep":
		if arg(0) == "inf" || arg(0) == "" {
			// Until stopped (a bare select{} is a deadlock to the Go runtime).
			stop := make(chan os.Signal, 1)
			signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
			<-stop
			return 0
		}
		d, err := time.ParseDuration(arg(0))
		if err != nil {
			return fail("%v", err)
		}
		time.Sleep(d)
		return 0
	}
	return fail("unknown command %q", cmd)
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, line)
	return err
}

func lookup(name, typ string) int {
	r := &net.Resolver{PreferGo: true}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch typ {
	case "SRV":
		_, srvs, err := r.LookupSRV(ctx, "", "", name)
		if err != nil {
			return fail("%v", err)
		}
		for _, s := range srvs {
			fmt.Printf("%s %d %d %d\n", s.Target, s.Port, s.Priority, s.Weight)
		}
	case "CNAME":
		c, err := r.LookupCNAME(ctx, name)
		if err != nil {
			return fail("%v", err)
		}
		fmt.Println(c)
	default:
		addrs, err := r.LookupHost(ctx, name)
		if err != nil {
			return fail("%v", err)
		}
		for _, a := range addrs {
			fmt.Println(a)
		}
	}
	return 0
}

func serve(port string) int {
	if port == "" {
		port = "8080"
	}
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := os.Stat("/tmp/unhealthy"); err == nil {
			http.Error(w, "unhealthy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/exit/{code}", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.PathValue("code"))
		fmt.Fprintln(w, "bye")
		go func() { time.Sleep(100 * time.Millisecond); os.Exit(code) }()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s\n", host, os.Getenv("NODE_NAME"))
	})
	srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	go func() {
		<-ch
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	fmt.Printf("serving on :%s\n", port)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		return fail("%v", err)
	}
	return 0
}
