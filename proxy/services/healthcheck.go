package services

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// healthChecks serves the healthCheckNodePort of every LoadBalancer Service with
// externalTrafficPolicy Local on this host, as kube-proxy does: any path answers 200 while the
// host has a ready endpoint of the Service and 503 otherwise, with a JSON body that names the
// Service and counts them. A load balancer outside the site probes it to send traffic only to
// the hosts that can serve it without another hop (and without losing the client's address).
type healthChecks struct {
	addr    string // address to listen on; "" all of the host's
	log     *logrus.Entry
	mu      sync.Mutex
	servers map[uint16]*healthServer
	failed  map[uint16]string // port -> last listen error logged
}

type healthServer struct {
	srv   *http.Server
	state atomic.Pointer[healthState]
}

type healthState struct {
	namespace, name string
	local           int // ready endpoints of the Service on this host
}

func newHealthChecks(addr string, log *logrus.Entry) *healthChecks {
	return &healthChecks{addr: addr, log: log, servers: map[uint16]*healthServer{}, failed: map[uint16]string{}}
}

// healthStates are the health check ports of ds with what each reports. A Service's ready local
// endpoints are counted once across its ports.
func healthStates(ds DesiredState) map[uint16]*healthState {
	out := map[uint16]*healthState{}
	seen := map[uint16]map[netip.Addr]bool{}
	for _, sp := range ds.Services {
		if sp.HealthCheckNodePort == 0 {
			continue
		}
		st := out[sp.HealthCheckNodePort]
		if st == nil {
			st = &healthState{namespace: sp.Namespace, name: sp.Name}
			out[sp.HealthCheckNodePort], seen[sp.HealthCheckNodePort] = st, map[netip.Addr]bool{}
		}
		for _, e := range sp.LocalEndpoints {
			if !e.Terminating && !seen[sp.HealthCheckNodePort][e.IP] {
				seen[sp.HealthCheckNodePort][e.IP] = true
				st.local++
			}
		}
	}
	return out
}

// update serves the health check ports of ds and stops those no Service has any more. A port
// that cannot be listened on (another program holds it) is logged and tried again on the next
// update.
func (h *healthChecks) update(ds DesiredState) {
	want := healthStates(ds)
	h.mu.Lock()
	defer h.mu.Unlock()
	for port, s := range h.servers {
		if want[port] == nil {
			_ = s.srv.Close()
			delete(h.servers, port)
		}
	}
	for port := range h.failed {
		if want[port] == nil {
			delete(h.failed, port)
		}
	}
	for port, st := range want {
		if s := h.servers[port]; s != nil {
			s.state.Store(st)
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(h.addr, strconv.Itoa(int(port))))
		if err != nil {
			if h.failed[port] != err.Error() {
				h.failed[port] = err.Error()
				h.log.WithError(err).WithField("service", st.namespace+"/"+st.name).Warn("cannot serve the Service's healthCheckNodePort")
			}
			continue
		}
		delete(h.failed, port)
		s := &healthServer{}
		s.state.Store(st)
		s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
		h.servers[port] = s
		go func() {
			if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				h.log.WithError(err).WithField("port", port).Warn("health check server stopped")
			}
		}()
	}
}

// close stops every server.
func (h *healthChecks) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for port, s := range h.servers {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.srv.Shutdown(ctx)
		cancel()
		delete(h.servers, port)
	}
}

// ServeHTTP answers as kube-proxy's service health server.
func (s *healthServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	st := s.state.Load()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(st.local))
	if st.local == 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintf(w, "{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": true\n}\n",
		st.namespace, st.name, st.local)
}
