package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/proxy"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	apiproxy "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// podPortForwardREST serves pods/portforward by proxying the upgraded stream to the node
// agent of the pod's host. kubectl 1.30+ speaks SPDY tunnelled in a websocket; the agent
// speaks SPDY, so such requests go through the tunnelling handler, as upstream.
type podPortForwardREST struct{ d *nodeDialer }

var _ rest.Connecter = &podPortForwardREST{}

func (r *podPortForwardREST) New() runtime.Object { return &corev1.Pod{} }
func (r *podPortForwardREST) Destroy()            {}

func (r *podPortForwardREST) ConnectMethods() []string {
	return []string{http.MethodGet, http.MethodPost}
}

func (r *podPortForwardREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &corev1.PodPortForwardOptions{}, false, ""
}

func (r *podPortForwardREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	o, ok := opts.(*corev1.PodPortForwardOptions)
	if !ok {
		return nil, fmt.Errorf("invalid options object: %#v", opts)
	}
	loc, pod, err := r.d.location(ctx, name, "")
	if err != nil {
		return nil, err
	}
	if pod.Status.Phase != corev1.PodRunning {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("pod %s is %s: port-forward needs a Running pod", name, pod.Status.Phase))
	}
	loc.Path = fmt.Sprintf("/portForward/%s/%s", genericapirequest.NamespaceValue(ctx), name)
	if len(o.Ports) > 0 {
		q := url.Values{}
		for _, p := range o.Ports {
			q.Add("port", strconv.Itoa(int(p)))
		}
		loc.RawQuery = q.Encode()
	}
	h := proxy.NewUpgradeAwareHandler(loc, r.d.transport, false, true, proxy.NewErrorResponder(responder))
	h.UpgradeTransport = proxy.NewUpgradeRequestRoundTripper(r.d.base, bearer{token: r.d.token, rt: proxy.MirrorRequest})
	return apiproxy.NewTranslatingHandler(h, apiproxy.NewTunnelingHandler(h), wsstream.IsWebSocketRequestWithTunnelingProtocol), nil
}

// decodePortForwardOptions reads pods/portforward query parameters (ports is repeated).
func decodePortForwardOptions(params url.Values, o *corev1.PodPortForwardOptions) error {
	for _, v := range params["ports"] {
		p, err := strconv.Atoi(v)
		if err != nil || p <= 0 || p > 65535 {
			return apierrors.NewBadRequest(fmt.Sprintf("ports: %q is not a port number (1-65535)", v))
		}
		o.Ports = append(o.Ports, int32(p))
	}
	return nil
}
