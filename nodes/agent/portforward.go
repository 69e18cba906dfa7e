package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/flotilla-dev/flotilla/nodes/network"
)

// portForwardProtocol is the SPDY subprotocol of pods/portforward (the API server tunnels
// kubectl's websocket into it).
const portForwardProtocol = "portforward.k8s.io"

// podNetworks finds a pod's sandbox (nodes/network.Network does).
type podNetworks interface {
	PodNetwork(ctx context.Context, uid string) (network.PodNetwork, bool)
}

// servePortForward answers /portForward/{namespace}/{pod}: every pair of streams (error and
// data, joined by their requestID) is one connection to the port the data stream names, on
// the pod's loopback.
func (m *PodManager) servePortForward(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("pod")
	pod, err := m.pods.Pods(ns).Get(name)
	if err != nil || pod.Spec.NodeName != m.cfg.NodeName {
		http.Error(w, fmt.Sprintf("pod %s/%s does not run on this host", ns, name), http.StatusNotFound)
		return
	}
	if pod.Status.Phase != corev1.PodRunning {
		http.Error(w, fmt.Sprintf("pod %s/%s is %s, not Running", ns, name, pod.Status.Phase), http.StatusBadRequest)
		return
	}
	dial := m.podDialer(pod)
	if _, err := httpstream.Handshake(r, w, []string{portForwardProtocol}); err != nil {
		return // Handshake answered
	}
	streams := make(chan httpstream.Stream, 8)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, _ <-chan struct{}) error {
		streams <- s
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	conn.SetIdleTimeout(4 * time.Hour)
	log := m.log.WithField("pod", ns+"/"+name)
	pairs := map[string]*forwardPair{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-conn.CloseChan():
			return
		case s := <-streams:
			id := s.Headers().Get(corev1.PortForwardRequestIDHeader)
			p := pairs[id]
			if p == nil {
				p = &forwardPair{}
				pairs[id] = p
			}
			switch s.Headers().Get(corev1.StreamType) {
			case corev1.StreamTypeError:
				p.errStream = s
			case corev1.StreamTypeData:
				p.data = s
			default:
				s.Reset()
				continue
			}
			if p.errStream != nil && p.data != nil {
				delete(pairs, id)
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.forward(r.Context(), dial, log)
				}()
			}
		}
	}
}

type forwardPair struct {
	errStream, data httpstream.Stream
}

// forward copies between the data stream and a new connection to its port until the pod's
// side ends; a failure is reported on the error stream, as kubectl expects.
func (p *forwardPair) forward(ctx context.Context, dial func(ctx context.Context, port int) (net.Conn, error), log *logrus.Entry) {
	defer p.errStream.Close()
	defer p.data.Close()
	port, err := strconv.Atoi(p.data.Headers().Get(corev1.PortHeader))
	if err != nil || port <= 0 || port > 65535 {
		fmt.Fprintf(p.errStream, "invalid port %q", p.data.Headers().Get(corev1.PortHeader))
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := dial(dctx, port)
	cancel()
	if err != nil {
		fmt.Fprintf(p.errStream, "error forwarding port %d: %v", port, err)
		return
	}
	defer c.Close()
	toPod := make(chan struct{})
	go func() {
		defer close(toPod)
		_, _ = io.Copy(c, p.data)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite() // the client is done sending; the pod may still answer
		}
	}()
	if _, err := io.Copy(p.data, c); err != nil {
		log.WithError(err).Debug("port-forward: copy from the pod")
	}
	<-toPod
}

// podDialer connects to a port on the pod's loopback: inside its network namespace, or on
// the host's for a hostNetwork pod.
func (m *PodManager) podDialer(pod *corev1.Pod) func(ctx context.Context, port int) (net.Conn, error) {
	return func(ctx context.Context, port int) (net.Conn, error) {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if pod.Spec.HostNetwork {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
		pn, ok := m.cfg.Network.(podNetworks)
		if !ok {
			return nil, fmt.Errorf("this host's pod network cannot reach into pods")
		}
		sandbox, found := pn.PodNetwork(ctx, string(pod.UID))
		if !found || sandbox.NetNSPath == "" {
			return nil, fmt.Errorf("pod %s/%s has no network sandbox on this host", pod.Namespace, pod.Name)
		}
		return network.DialInNetNS(ctx, sandbox.NetNSPath, "tcp", addr)
	}
}
