package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/test/framework"
	"github.com/flotilla-dev/flotilla/test/netnstest"
)

const (
	// benchPodIP is the backend pod's address on its veth; the namespaces are fresh, so no
	// address of the machine can collide with it.
	benchPodIP   = "10.244.0.2"
	benchHostIP  = "10.244.0.1"
	benchPodPort = "8080"
	// The two proxies listen on the loopback of the host namespace, where wrk runs too.
	benchNginxAddr    = "127.0.0.1:8081"
	benchFlotillaAddr = "127.0.0.1:8082"
	benchHost         = "web.example"
	// benchBody is what the backend serves: a small static file, so that the proxies, not the
	// backend, are what the figures compare.
	benchBody = "hello from the backend pod\n"
)

// BenchmarkIngressVsNginx compares the Ingress data plane with nginx as a reverse proxy in
// front of the same backend pod, both driven by wrk, and reports requests/s and p99 latency
// of each and their ratio (flotilla-req/s over nginx-req/s; the goal is at least 0.9
// at equal p99). It runs its work once whatever b.N is, so run it with -benchtime 1x:
//
//	go test -run '^$' -bench BenchmarkIngressVsNginx -benchtime 1x ./proxy/ingress/
//
// The layout mirrors a host: a "host" network namespace holds wrk, nginx and the flotilla
// proxy (listening on its loopback), and a "pod" namespace, joined to it by a veth pair,
// holds the backend. The backend is nginx serving a static file, in a process of its own, so
// that it shares neither the Go scheduler nor the garbage collector with the proxy under
// test and is cheap enough not to be the bottleneck. The flotilla proxy runs in this test
// process (so -cpuprofile profiles it); only its listener and its backend dials are made in
// the host namespace, the request path is the production one.
//
// Each side is warmed up first (FLOTILLA_BENCH_WRK_WARMUP, default 2s), then measured in
// ABBA order (nginx, flotilla, flotilla, nginx; FLOTILLA_BENCH_PAIRS such blocks, default 1)
// so that drift of the machine cancels out. wrk runs with FLOTILLA_BENCH_WRK_THREADS threads
// (default 2), FLOTILLA_BENCH_WRK_CONNECTIONS connections (default 64) and
// FLOTILLA_BENCH_WRK_DURATION per round (default 10s). It needs root, ip, wrk and nginx (the
// Debian packages iproute2, wrk and nginx): without them it skips, or fails when CI=true.
func BenchmarkIngressVsNginx(b *testing.B) {
	requireBenchTools(b)
	threads := envInt(b, "FLOTILLA_BENCH_WRK_THREADS", 2)
	conns := envInt(b, "FLOTILLA_BENCH_WRK_CONNECTIONS", 64)
	pairs := envInt(b, "FLOTILLA_BENCH_PAIRS", 1)
	duration := envDuration(b, "FLOTILLA_BENCH_WRK_DURATION", 10*time.Second)
	warmup := envDuration(b, "FLOTILLA_BENCH_WRK_WARMUP", 2*time.Second)
	if conns < threads {
		b.Fatalf("wrk needs at least as many connections (%d) as threads (%d)", conns, threads)
	}

	id := rand.Intn(100000)
	hostNS, podNS := fmt.Sprintf("flbenchh%05d", id), fmt.Sprintf("flbenchp%05d", id)
	hostPath := "/run/netns/" + hostNS
	netnstest.New(b, hostNS)
	netnstest.New(b, podNS)
	netnstest.Sh(b, "ip", "-n", hostNS, "link", "add", "vpod", "type", "veth", "peer", "name", "eth0", "netns", podNS)
	netnstest.Sh(b, "ip", "-n", hostNS, "addr", "add", benchHostIP+"/24", "dev", "vpod")
	netnstest.Sh(b, "ip", "-n", hostNS, "link", "set", "vpod", "up")
	netnstest.Sh(b, "ip", "-n", podNS, "addr", "add", benchPodIP+"/24", "dev", "eth0")
	netnstest.Sh(b, "ip", "-n", podNS, "link", "set", "eth0", "up")
	// Registered after the namespaces, so it runs before they are deleted: whatever is still
	// running in them was started by this benchmark (nginx workers whose master died).
	b.Cleanup(func() {
		for _, ns := range []string{hostNS, podNS} {
			out, _ := exec.Command("ip", "netns", "pids", ns).Output()
			for _, f := range strings.Fields(string(out)) {
				// This process is listed too when a thread switched by netnstest.In was the
				// main one, which the runtime parks rather than ends.
				if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})

	dir := b.TempDir()
	workers := runtime.GOMAXPROCS(0)
	startNginx(b, podNS, filepath.Join(dir, "backend"), workers, backendConf)
	startNginx(b, hostNS, filepath.Join(dir, "proxy"), workers, proxyConf)

	// The flotilla data plane, configured as Run configures it.
	s := NewServer("", logrus.NewEntry(logrus.New()))
	var dials atomic.Int64
	s.transport.DialContext = dialIn(hostPath, &dials)
	s.Swap(tableWith([]string{net.JoinHostPort(benchPodIP, benchPodPort)}, false))
	var l net.Listener
	if err := netnstest.In(hostPath, func() (err error) {
		l, err = net.Listen("tcp", benchFlotillaAddr)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler(false), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = srv.Serve(l) }()
	b.Cleanup(func() {
		_ = srv.Close()
		s.transport.CloseIdleConnections()
	})

	sides := []struct{ name, url string }{
		{"nginx", "http://" + benchNginxAddr + "/"},
		{"flotilla", "http://" + benchFlotillaAddr + "/"},
	}
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: dialIn(hostPath, nil), DisableKeepAlives: true}}
	for _, sd := range sides {
		waitServing(b, client, sd.url)
	}
	wrk := func(url string, d time.Duration) wrkResult {
		args := []string{"netns", "exec", hostNS, "wrk", "-t" + strconv.Itoa(threads), "-c" + strconv.Itoa(conns),
			"-d" + strconv.Itoa(int(d.Round(time.Second)/time.Second)) + "s", "--latency", "-H", "Host: " + benchHost, url}
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			b.Fatalf("wrk %s: %v\n%s", url, err, out)
		}
		r, err := parseWrk(string(out))
		if err != nil {
			b.Fatalf("wrk %s: %v\n%s", url, err, out)
		}
		return r
	}
	for _, sd := range sides {
		wrk(sd.url, warmup)
	}

	// One measurement is the benchmark, whatever b.N is: b.N rounds of wrk would only make it
	// longer, and the figures are rates already.
	dialsBefore := dials.Load()
	b.ResetTimer()
	sum := map[string]*wrkResult{"nginx": {}, "flotilla": {}}
	for range pairs {
		for _, i := range []int{0, 1, 1, 0} {
			sd := sides[i]
			r := wrk(sd.url, duration)
			b.Logf("%-8s %9.0f req/s  p99 %6.2f ms", sd.name, r.rps, ms(r.p99))
			sum[sd.name].rps += r.rps / float64(2*pairs)
			sum[sd.name].p99 += r.p99 / time.Duration(2*pairs)
		}
	}
	b.StopTimer()
	// More dials than connections means the idle pool to the backend was too small and
	// connections were closed and reopened under load.
	b.Logf("flotilla dialled the backend %d times while measured (%d before)", dials.Load()-dialsBefore, dialsBefore)
	n, f := sum["nginx"], sum["flotilla"]
	b.ReportMetric(f.rps, "flotilla-req/s")
	b.ReportMetric(n.rps, "nginx-req/s")
	b.ReportMetric(f.rps/n.rps, "ratio")
	b.ReportMetric(ms(f.p99), "flotilla-p99-ms")
	b.ReportMetric(ms(n.p99), "nginx-p99-ms")
	b.Logf("flotilla %.0f req/s p99 %.2f ms, nginx %.0f req/s p99 %.2f ms: %.2fx nginx (wrk -t%d -c%d, %s x %d rounds each, GOMAXPROCS %d)",
		f.rps, ms(f.p99), n.rps, ms(n.p99), f.rps/n.rps, threads, conns, duration, 2*pairs, workers)
}

// requireBenchTools skips (or fails in CI, which must measure) when what the benchmark runs is
// missing.
func requireBenchTools(b *testing.B) {
	b.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, bin := range []string{"ip", "wrk", "nginx"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := "needs root and the Debian packages iproute2, wrk and nginx (apt-get install -y --no-install-recommends iproute2 wrk nginx, or make bench-ingress); missing: " + strings.Join(missing, ", ")
	if framework.InCI() {
		b.Fatal(msg)
	}
	b.Skip(msg)
}

// dialIn returns a DialContext that makes its sockets in the network namespace at path and
// counts them in n (when not nil): a
// socket belongs to the namespace of the thread that creates it, so each dial runs on a
// thread switched there. Dials are rare (backend connections are kept alive), so the thread
// each one costs does not show in the figures.
func dialIn(path string, n *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if n != nil {
			n.Add(1)
		}
		var c net.Conn
		err := netnstest.In(path, func() (err error) {
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// startNginx runs nginx in the foreground (daemon off) in network namespace ns with the
// configuration conf renders for dir, and stops it, by its PID, when the benchmark ends.
func startNginx(b *testing.B, ns, dir string, workers int, conf func(dir string, workers int) string) {
	b.Helper()
	for _, d := range []string{dir, filepath.Join(dir, "logs"), filepath.Join(dir, "www")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "www", "index.html"), []byte(benchBody), 0o644); err != nil {
		b.Fatal(err)
	}
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf(dir, workers)), 0o644); err != nil {
		b.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "logs", "stdout"))
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	// ip netns exec execs nginx in place, so the PID is nginx's master, which stops its
	// workers when told to.
	cmd := exec.Command("ip", "netns", "exec", ns, "nginx", "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "logs", "error.log"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	// A configuration error ends nginx at once; say why rather than time out later.
	select {
	case err := <-exited:
		log, _ := os.ReadFile(filepath.Join(dir, "logs", "error.log"))
		stdout, _ := os.ReadFile(out.Name())
		exited <- err
		b.Fatalf("nginx in %s exited: %v\n%s%s", ns, err, stdout, log)
	case <-time.After(100 * time.Millisecond):
	}
}

// nginxCommon is the part of both configurations that keeps nginx inside dir: pid file, logs
// and temporary files, and the workers as root (dir is private to root).
func nginxCommon(dir string, workers int) string {
	return fmt.Sprintf(`daemon off;
master_process on;
worker_processes %d;
user root;
pid %[2]s/nginx.pid;
error_log %[2]s/logs/error.log warn;
events { worker_connections 4096; }
`, workers, dir)
}

func nginxHTTPCommon(dir string) string {
	return fmt.Sprintf(`	access_log off;
	client_body_temp_path %[1]s/client_body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	default_type text/plain;
	# wrk and the proxies keep their connections for the whole run, as the Go server and
	# transport do; nginx's default closes a connection after 1,000 requests.
	keepalive_requests 10000000;
	keepalive_timeout 120s;
`, dir)
}

// backendConf serves benchBody as a static file on the pod's address.
func backendConf(dir string, workers int) string {
	return nginxCommon(dir, workers) + "http {\n" + nginxHTTPCommon(dir) + fmt.Sprintf(`	server {
		listen %s:%s;
		root %s/www;
		location / { }
	}
}
`, benchPodIP, benchPodPort, dir)
}

// proxyConf is nginx as the reverse proxy flotilla is compared with: keep-alive to the
// backend (64 idle connections, HTTP/1.1 without "Connection: close") and the same headers
// flotilla sends (the client's Host, X-Forwarded-For/-Host/-Proto), as ingress-nginx does.
func proxyConf(dir string, workers int) string {
	return nginxCommon(dir, workers) + "http {\n" + nginxHTTPCommon(dir) + fmt.Sprintf(`	upstream backend {
		server %s:%s;
		keepalive 64;
		keepalive_requests 10000000;
		keepalive_timeout 120s;
	}
	server {
		listen %s;
		location / {
			proxy_pass http://backend;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header Host $http_host;
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
			proxy_set_header X-Forwarded-Host $http_host;
			proxy_set_header X-Forwarded-Proto $scheme;
		}
	}
}
`, benchPodIP, benchPodPort, benchNginxAddr)
}

// waitServing polls url until the backend's body comes back through it: the proxy listens
// and reaches the backend. It runs before any measurement.
func waitServing(b *testing.B, c *http.Client, url string) {
	b.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = benchHost
		resp, err := c.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(body) == benchBody {
				return
			}
			err = fmt.Errorf("status %d, body %q", resp.StatusCode, body)
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("%s not serving the backend after 15s: %v", url, last)
}

type wrkResult struct {
	rps float64
	p99 time.Duration
}

var (
	wrkRPS     = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)\s*$`)
	wrkP99     = regexp.MustCompile(`(?m)^\s+99%\s+([0-9.]+)(us|ms|s|m|h)\s*$`)
	wrkNon2xx  = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses:\s+(\d+)`)
	wrkSockErr = regexp.MustCompile(`(?m)^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// parseWrk reads requests/s and the 99th percentile of `wrk --latency` output; a run with
// error responses, failed connects or timeouts measured something else and is an error.
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	m := wrkRPS.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New("no Requests/sec line")
	}
	r.rps, _ = strconv.ParseFloat(m[1], 64)
	m = wrkP99.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New("no 99% latency line (was --latency given?)")
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour}[m[2]]
	r.p99 = time.Duration(v * float64(unit))
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil && m[1] != "0" {
		return r, fmt.Errorf("%s responses were not 2xx/3xx", m[1])
	}
	if m := wrkSockErr.FindStringSubmatch(out); m != nil && (m[1] != "0" || m[4] != "0") {
		return r, fmt.Errorf("socket errors: %d connect, %d timeout", atoi(m[1]), atoi(m[4]))
	}
	if r.rps <= 0 {
		return r, errors.New("no request completed")
	}
	return r, nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second {
		b.Fatalf("%s=%q: want a duration of at least 1s (wrk counts whole seconds)", name, v)
	}
	return d
}
