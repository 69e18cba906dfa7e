package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/proxy"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericrest "k8s.io/apiserver/pkg/registry/generic/rest"
	"k8s.io/apiserver/pkg/registry/rest"
)

// NodeConnection is how the API server reaches the node agents (pods/log): their HTTPS
// endpoint, verified with the site CA, authenticated with a client certificate (or a bearer
// token).
type NodeConnection struct {
	CAFile string
	// CertFile and KeyFile are the client certificate the agents admit.
	CertFile, KeyFile string
	// Token is sent as a bearer token when set.
	Token string
}

// nodeDialer builds the requests to a pod's node agent.
type nodeDialer struct {
	getter    rest.Getter // pods
	nodes     rest.Getter
	transport http.RoundTripper
	// base is the TLS transport without the token (upgraded connections add it per request).
	base  *http.Transport
	token string
}

func newNodeDialer(pods, nodes rest.Getter, conn NodeConnection) (*nodeDialer, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if conn.CAFile != "" {
		pem, err := os.ReadFile(conn.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read the CA for node connections: %w", err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tlsCfg.RootCAs = pool
	}
	if conn.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(conn.CertFile, conn.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate for node connections: %w", err)
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	base := &http.Transport{TLSClientConfig: tlsCfg, DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		ResponseHeaderTimeout: 30 * time.Second}
	return &nodeDialer{getter: pods, nodes: nodes, transport: bearer{token: conn.Token, rt: base}, base: base, token: conn.Token}, nil
}

type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.rt.RoundTrip(r)
}

// location returns the node agent URL for path on the node of a pod, and the pod.
func (d *nodeDialer) location(ctx context.Context, name, path string) (*url.URL, *corev1.Pod, error) {
	obj, err := d.getter.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	pod := obj.(*corev1.Pod)
	if pod.Spec.NodeName == "" {
		return nil, pod, apierrors.NewBadRequest(fmt.Sprintf("pod %s is not scheduled to a node yet", name))
	}
	nobj, err := d.nodes.Get(ctx, pod.Spec.NodeName, &metav1.GetOptions{})
	if err != nil {
		return nil, pod, err
	}
	u, err := nodeAgentURL(nobj.(*corev1.Node), path)
	return u, pod, err
}

// nodeAgentURL returns the URL of path on a node's agent endpoint: its InternalIP and the
// port it publishes as status.daemonEndpoints.kubeletEndpoint.
func nodeAgentURL(node *corev1.Node, path string) (*url.URL, error) {
	host := ""
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			host = a.Address
			break
		}
	}
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	if host == "" || port == 0 {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("node %s does not publish its agent endpoint yet", node.Name))
	}
	return &url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(int(port))), Path: path}, nil
}

// podLogREST serves pods/log by streaming from the node agent of the pod's host.
type podLogREST struct{ d *nodeDialer }

var (
	_ rest.GetterWithOptions = &podLogREST{}
	_ rest.StorageMetadata   = &podLogREST{}
)

func (r *podLogREST) New() runtime.Object { return &corev1.Pod{} }
func (r *podLogREST) Destroy()            {}

func (r *podLogREST) ProducesMIMETypes(verb string) []string {
	return []string{"text/plain"}
}

func (r *podLogREST) ProducesObject(verb string) any { return "" }

func (r *podLogREST) NewGetOptions() (runtime.Object, bool, string) {
	return &corev1.PodLogOptions{}, false, ""
}

func (r *podLogREST) Get(ctx context.Context, name string, opts runtime.Object) (runtime.Object, error) {
	o, ok := opts.(*corev1.PodLogOptions)
	if !ok {
		return nil, fmt.Errorf("invalid options object: %#v", opts)
	}
	if o.TailLines != nil && *o.TailLines < 0 {
		return nil, apierrors.NewBadRequest("tailLines must be a non-negative integer")
	}
	if o.SinceSeconds != nil && *o.SinceSeconds < 1 {
		return nil, apierrors.NewBadRequest("sinceSeconds must be a positive integer")
	}
	ns := genericapirequest.NamespaceValue(ctx)
	loc, pod, err := r.d.location(ctx, name, "")
	if err != nil {
		return nil, err
	}
	container := o.Container
	if container == "" {
		if len(pod.Spec.Containers) != 1 {
			var names []string
			for _, c := range pod.Spec.Containers {
				names = append(names, c.Name)
			}
			return nil, apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: %v", name, names))
		}
		container = pod.Spec.Containers[0].Name
	}
	loc.Path = fmt.Sprintf("/containerLogs/%s/%s/%s", ns, name, container)
	q := url.Values{}
	if o.Follow {
		q.Set("follow", "true")
	}
	if o.Previous {
		q.Set("previous", "true")
	}
	if o.Timestamps {
		q.Set("timestamps", "true")
	}
	if o.TailLines != nil {
		q.Set("tailLines", strconv.FormatInt(*o.TailLines, 10))
	}
	if o.LimitBytes != nil {
		q.Set("limitBytes", strconv.FormatInt(*o.LimitBytes, 10))
	}
	if o.SinceSeconds != nil {
		q.Set("sinceSeconds", strconv.FormatInt(*o.SinceSeconds, 10))
	}
	if o.SinceTime != nil {
		q.Set("sinceTime", o.SinceTime.UTC().Format(time.RFC3339))
	}
	loc.RawQuery = q.Encode()
	return &genericrest.LocationStreamer{
		Location: loc, Transport: r.d.transport, ContentType: "text/plain", Flush: o.Follow,
		ResponseChecker: genericrest.NewGenericHttpResponseChecker(corev1.Resource("pods/log"), name),
		RedirectChecker: genericrest.PreventRedirects,
	}, nil
}

// podOptionsCodec decodes the query parameters of pods/log (the generated conversions of
// upstream are not available outside k8s.io/kubernetes) and defers to the meta codec for
// everything else.
type podOptionsCodec struct{ runtime.ParameterCodec }

func (c podOptionsCodec) DecodeParameters(params url.Values, from schema.GroupVersion, into runtime.Object) error {
	if e, ok := into.(*corev1.PodExecOptions); ok {
		return decodeExecOptions(params, e)
	}
	if f, ok := into.(*corev1.PodPortForwardOptions); ok {
		return decodePortForwardOptions(params, f)
	}
	o, ok := into.(*corev1.PodLogOptions)
	if !ok {
		return c.ParameterCodec.DecodeParameters(params, from, into)
	}
	boolean := func(k string) (bool, error) {
		v := params.Get(k)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, apierrors.NewBadRequest(fmt.Sprintf("%s: %q is not a boolean", k, v))
		}
		return b, nil
	}
	integer := func(k string) (*int64, error) {
		v := params.Get(k)
		if v == "" {
			return nil, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("%s: %q is not an integer", k, v))
		}
		return &n, nil
	}
	var err error
	o.Container = params.Get("container")
	if o.Follow, err = boolean("follow"); err != nil {
		return err
	}
	if o.Previous, err = boolean("previous"); err != nil {
		return err
	}
	if o.Timestamps, err = boolean("timestamps"); err != nil {
		return err
	}
	if o.InsecureSkipTLSVerifyBackend, err = boolean("insecureSkipTLSVerifyBackend"); err != nil {
		return err
	}
	if o.SinceSeconds, err = integer("sinceSeconds"); err != nil {
		return err
	}
	if o.TailLines, err = integer("tailLines"); err != nil {
		return err
	}
	if o.LimitBytes, err = integer("limitBytes"); err != nil {
		return err
	}
	if v := params.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("sinceTime: %q is not an RFC 3339 time", v))
		}
		mt := metav1.NewTime(t)
		o.SinceTime = &mt
	}
	return nil
}

// podExecREST serves pods/exec by proxying the upgraded (websocket) stream to the node agent
// of the pod's host.
type podExecREST struct{ d *nodeDialer }

var _ rest.Connecter = &podExecREST{}

func (r *podExecREST) New() runtime.Object { return &corev1.Pod{} }
func (r *podExecREST) Destroy()            {}

func (r *podExecREST) ConnectMethods() []string { return []string{http.MethodGet, http.MethodPost} }

func (r *podExecREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &corev1.PodExecOptions{}, false, ""
}

func (r *podExecREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	o, ok := opts.(*corev1.PodExecOptions)
	if !ok {
		return nil, fmt.Errorf("invalid options object: %#v", opts)
	}
	if len(o.Command) == 0 {
		return nil, apierrors.NewBadRequest("you must specify at least 1 command")
	}
	if !o.Stdin && !o.Stdout && !o.Stderr {
		return nil, apierrors.NewBadRequest("you must specify at least one of stdin, stdout, stderr")
	}
	loc, pod, err := r.d.location(ctx, name, "")
	if err != nil {
		return nil, err
	}
	container := o.Container
	if container == "" {
		container = pod.Spec.Containers[0].Name
	}
	loc.Path = fmt.Sprintf("/exec/%s/%s/%s", genericapirequest.NamespaceValue(ctx), name, container)
	q := url.Values{"command": o.Command}
	for k, v := range map[string]bool{"stdin": o.Stdin, "stdout": o.Stdout, "stderr": o.Stderr, "tty": o.TTY} {
		if v {
			q.Set(k, "true")
		}
	}
	loc.RawQuery = q.Encode()
	h := proxy.NewUpgradeAwareHandler(loc, r.d.transport, false, true, proxy.NewErrorResponder(responder))
	h.UpgradeTransport = proxy.NewUpgradeRequestRoundTripper(r.d.base, bearer{token: r.d.token, rt: proxy.MirrorRequest})
	return h, nil
}

// decodeExecOptions reads pods/exec query parameters (command is repeated).
func decodeExecOptions(params url.Values, o *corev1.PodExecOptions) error {
	o.Container = params.Get("container")
	o.Command = params["command"]
	for k, dst := range map[string]*bool{"stdin": &o.Stdin, "stdout": &o.Stdout, "stderr": &o.Stderr, "tty": &o.TTY} {
		v := params.Get(k)
		if v == "" {
			continue
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("%s: %q is not a boolean", k, v))
		}
		*dst = b
	}
	return nil
}
