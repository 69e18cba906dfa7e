// Package ingress is the Ingress controller and HTTP(S) reverse proxy that runs on every host.
// It serves the Ingresses of IngressClass "flotilla" (controller flotilla.dev/ingress), sends
// traffic straight to ready endpoints of the backend Services, and records the host's address
// in each Ingress's status.
//
// Documented choices: ImplementationSpecific matches like Prefix; a request that matches no rule
// and no defaultBackend gets 404; a backend Service that is missing, lacks the port, or has no
// ready endpoint gets 503 (and a Warning Event for the first two); resource backends are refused
// with a Warning Event; conflicting rules of several Ingresses go to the oldest Ingress; a host
// with rules but no matching path goes to the defaultBackend of the Ingress that owns the host,
// not to rules without a host.
//
// Annotations read on an Ingress (others are ignored): kubernetes.io/ingress.class
// (legacy class selector) and flotilla.dev/ssl-redirect: "true" (answer plain-HTTP requests for
// its rules with a 308 redirect to HTTPS).
package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/nodes/refcache"
)

// Config configures the ingress proxy of one host.
type Config struct {
	NodeName  string // this host's Node, whose InternalIPs go into Ingress status
	HTTPAddr  string // default ":80"
	HTTPSAddr string // ":443" in DefaultConfig; "" disables HTTPS
	ClassName string // default "flotilla"
	Log       *logrus.Entry
	// Informers is the host's shared factory; nil makes one of its own. Run registers its
	// informers on it and starts them with the ctx given to Run, so give every user of one
	// factory the host's context. Run never shuts a shared factory down.
	Informers informers.SharedInformerFactory
	// Secrets reads the TLS Secrets the Ingresses served name, each by name with a watch of
	// its own (nodes/refcache): a host may read no other Secret (the Node authorizer). The
	// host shares its cache with the node agent; nil makes one of its own when Run starts.
	Secrets *refcache.Cache[*corev1.Secret]
}

// DefaultConfig returns the configuration of a host: HTTP on :80, HTTPS on :443, class flotilla.
func DefaultConfig(nodeName string) Config {
	return Config{NodeName: nodeName, HTTPAddr: ":80", HTTPSAddr: ":443", ClassName: DefaultClassName}
}

func (c *Config) defaults() {
	if c.HTTPAddr == "" {
		c.HTTPAddr = ":80"
	}
	if c.ClassName == "" {
		c.ClassName = DefaultClassName
	}
	if c.Log == nil {
		c.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	c.Log = c.Log.WithField("component", "ingress")
}

// EnsureClass creates IngressClass "flotilla" (controller flotilla.dev/ingress, marked default)
// unless it exists. An existing class is left as the user made it (they may have moved the
// default mark elsewhere), but one naming another controller is an error.
func EnsureClass(ctx context.Context, client kubernetes.Interface) error {
	ic := &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        DefaultClassName,
			Annotations: map[string]string{annotationDefaultClass: "true"},
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "flotilla"},
		},
		Spec: networkingv1.IngressClassSpec{Controller: ControllerName},
	}
	_, err := client.NetworkingV1().IngressClasses().Create(ctx, ic, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create IngressClass %s: %w", DefaultClassName, err)
	}
	cur, err := client.NetworkingV1().IngressClasses().Get(ctx, DefaultClassName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get IngressClass %s: %w", DefaultClassName, err)
	}
	if cur.Spec.Controller != ControllerName {
		return fmt.Errorf("IngressClass %s exists with controller %q, not %q: delete it so the built-in class can be created, or rename yours",
			DefaultClassName, cur.Spec.Controller, ControllerName)
	}
	return nil
}

// Run serves the Ingresses of our class until ctx ends (informers: Ingress, IngressClass,
// Service, EndpointSlice, Nodes; the kubernetes.io/tls Secrets they name, one by one). It
// binds its listeners first, so a port already in use is reported at once, and starts
// serving once the informers have synced.
func Run(ctx context.Context, client kubernetes.Interface, cfg Config) error {
	cfg.defaults()
	httpL, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("ingress HTTP listener on %s: %w (change --ingress-http-port or free the port)", cfg.HTTPAddr, err)
	}
	var httpsL net.Listener
	httpsPort := ""
	if cfg.HTTPSAddr != "" {
		if httpsL, err = net.Listen("tcp", cfg.HTTPSAddr); err != nil {
			httpL.Close()
			return fmt.Errorf("ingress HTTPS listener on %s: %w (change --ingress-https-port or free the port)", cfg.HTTPSAddr, err)
		}
		_, httpsPort, _ = net.SplitHostPort(httpsL.Addr().String())
	}
	c := newController(client, cfg, NewServer(httpsPort, cfg.Log))
	if err := removeDrainTable(0, listenerPort(httpL)); err != nil {
		// Only a crash in the middle of a drain leaves the table; one that cannot be removed
		// refuses new connections to these ports.
		c.log.WithError(err).Debug("remove a drain table left by an earlier run")
	}
	return c.run(ctx, httpL, httpsL)
}

func listenerPort(l net.Listener) int {
	if a, ok := l.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// drain refuses new connections to the listeners' ports and waits (at most timeout) until
// the servers accepted what the kernel had queued; it returns the function that removes
// the refusal, to call once the listeners are closed.
func (c *controller) drain(timeout time.Duration, ls ...net.Listener) func() {
	var ports []int
	var addr netip.Addr
	for _, l := range ls {
		if l == nil {
			continue
		}
		if a, ok := l.Addr().(*net.TCPAddr); ok {
			ports = append(ports, a.Port)
			addr, _ = netip.AddrFromSlice(a.IP)
			addr = addr.Unmap()
		}
	}
	if len(ports) == 0 {
		return func() {}
	}
	if err := refuseNewConnections(0, addr, ports); err != nil {
		c.log.WithError(err).Warn("ingress: cannot refuse new connections before closing: connections the kernel queued meanwhile are reset")
		return func() {}
	}
	start := time.Now()
	if err := waitAccepted(start.Add(timeout), ls...); err != nil {
		c.log.WithError(err).Warn("ingress: closing with connections still queued")
	}
	c.log.WithField("took", time.Since(start).Round(time.Millisecond)).Info("ingress proxy draining: new connections refused, queued ones accepted")
	return func() {
		if err := removeDrainTable(0, ports[0]); err != nil {
			c.log.WithError(err).Warn("ingress: the table refusing new connections stays until the next start")
		}
		c.log.Info("ingress proxy stopped")
	}
}

type controller struct {
	client kubernetes.Interface
	cfg    Config
	srv    *Server
	log    *logrus.Entry

	factory           informers.SharedInformerFactory
	ownFactories      bool // made here, not the host's: Run may shut them down
	handlers          []handlerReg
	ingresses         cache.Indexer
	classes, services cache.Indexer
	slices, nodes     cache.Indexer
	synced            []cache.InformerSynced
	// secrets reads the TLS Secrets by name; tlsSecrets are the namespace/name of those
	// the last snapshot used, whose changes rebuild the tables.
	secrets    *refcache.Cache[*corev1.Secret]
	tlsSecrets atomic.Pointer[map[string]bool]

	kick     chan struct{}
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder

	certMu   sync.Mutex
	certs    map[types.UID]cachedCert
	problems problemReporter
	recheck  *time.Timer // rebuilds when a problem has lasted the grace
}

// handlerReg is an event handler to remove from a shared informer when Run ends.
type handlerReg struct {
	inf cache.SharedIndexInformer
	reg cache.ResourceEventHandlerRegistration
}

type cachedCert struct {
	rv   string
	cert *tls.Certificate
	err  error
}

func newController(client kubernetes.Interface, cfg Config, srv *Server) *controller {
	c := &controller{
		client: client, cfg: cfg, srv: srv, log: cfg.Log,
		factory: cfg.Informers, secrets: cfg.Secrets,
		kick: make(chan struct{}, 1),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "ingress-status"}),
		certs:    map[types.UID]cachedCert{},
		problems: problemReporter{grace: ProblemGrace, now: time.Now},
	}
	if c.factory == nil {
		c.ownFactories = true
		c.factory = informers.NewSharedInformerFactory(client, 0)
	}
	kick := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.poke() }, UpdateFunc: func(any, any) { c.poke() }, DeleteFunc: func(any) { c.poke() },
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
		c.poke()
	}
	all := func(any) { c.enqueueAll(); c.poke() }
	add := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) cache.Indexer {
		// Fails only on a stopped informer, which a shared one is only once the host's
		// context has ended, and Run's with it.
		if reg, err := inf.AddEventHandler(h); err == nil {
			c.handlers = append(c.handlers, handlerReg{inf, reg})
		}
		c.synced = append(c.synced, inf.HasSynced)
		return inf.GetIndexer()
	}
	c.ingresses = add(c.factory.Networking().V1().Ingresses().Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) }, DeleteFunc: func(any) { c.poke() },
	})
	c.classes = add(c.factory.Networking().V1().IngressClasses().Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: all, UpdateFunc: func(_, cur any) { all(cur) }, DeleteFunc: all,
	})
	c.services = add(c.factory.Core().V1().Services().Informer(), kick)
	c.slices = add(c.factory.Discovery().V1().EndpointSlices().Informer(), kick)
	c.nodes = add(c.factory.Core().V1().Nodes().Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: all, UpdateFunc: func(old, cur any) {
			if !apiequality.Semantic.DeepEqual(old.(*corev1.Node).Status.Addresses, cur.(*corev1.Node).Status.Addresses) {
				all(cur)
			}
		}, DeleteFunc: all,
	})
	return c
}

// secretChanged rebuilds the tables when a Secret they use changes; the node agent's
// Secrets share the cache and do not change the routing tables.
func (c *controller) secretChanged(namespace, name string) {
	if used := c.tlsSecrets.Load(); used != nil && (*used)[namespace+"/"+name] {
		c.poke()
	}
}

func (c *controller) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *controller) enqueueAll() {
	for _, key := range c.ingresses.ListKeys() {
		c.queue.Add(key)
	}
}

func (c *controller) run(ctx context.Context, httpL, httpsL net.Listener) error {
	defer c.queue.ShutDown()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	c.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "flotilla-ingress", Host: c.cfg.NodeName})

	// Shared informers serve the host's other components too and run on the caller's ctx. Our
	// own stop on the one below: a listener failure ends Run with the caller's ctx still live.
	informerStop := ctx.Done()
	ctx, cancel := context.WithCancel(ctx)
	if c.ownFactories {
		informerStop = ctx.Done()
	}
	c.factory.Start(informerStop)
	if c.secrets == nil {
		c.secrets = refcache.New[*corev1.Secret](ctx, "secrets", func(ns string) refcache.Client[*corev1.SecretList] {
			return c.client.CoreV1().Secrets(ns)
		}, refcache.Config{Log: c.log})
	}
	removeNotify := c.secrets.Notify(c.secretChanged)
	defer func() {
		removeNotify()
		cancel()
		// Shared informers outlive Run: leave nothing behind that feeds a stopped queue.
		for _, h := range c.handlers {
			_ = h.inf.RemoveEventHandler(h.reg)
		}
		if c.ownFactories {
			c.factory.Shutdown()
		}
	}()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		httpL.Close()
		if httpsL != nil {
			httpsL.Close()
		}
		return fmt.Errorf("ingress: informers did not sync: %w", context.Cause(ctx))
	}
	c.rebuild()

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	serve := func(srv *http.Server, l net.Listener, tlsOn bool) {
		defer wg.Done()
		var err error
		if tlsOn {
			err = srv.ServeTLS(l, "", "")
		} else {
			err = srv.Serve(l)
		}
		// closeServers closes the listeners itself (net.ErrClosed) before Shutdown.
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			errc <- fmt.Errorf("ingress server on %s: %w", l.Addr(), err)
		}
	}
	// net/http reports client mistakes (TLS handshakes for unknown names, bad requests) there.
	errLog := c.log.WriterLevel(logrus.DebugLevel)
	defer errLog.Close()
	var open []*atomic.Int64 // each server's open connections
	newSrv := func(tlsOn bool) *http.Server {
		n := new(atomic.Int64)
		open = append(open, n)
		s := &http.Server{Handler: c.srv.Handler(tlsOn), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			ErrorLog: stdlog.New(errLog, "", 0), ConnState: countConns(n)}
		if tlsOn {
			s.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.srv.GetCertificate, NextProtos: []string{"h2", "http/1.1"}}
		}
		return s
	}
	servers := []*http.Server{newSrv(false)}
	wg.Add(1)
	go serve(servers[0], httpL, false)
	if httpsL != nil {
		servers = append(servers, newSrv(true))
		wg.Add(1)
		go serve(servers[1], httpsL, true)
	}
	c.log.WithFields(logrus.Fields{"http": httpL.Addr().String(), "https": addrOf(httpsL), "class": c.cfg.ClassName}).Info("ingress proxy serving")

	wg.Add(1)
	go func() {
		defer wg.Done()
		for c.processStatus(ctx) {
		}
	}()

	// A periodic rebuild also keeps the watches of the TLS Secrets in use (the cache stops
	// those nobody asked for in a while).
	refresh := time.NewTicker(time.Minute)
	defer refresh.Stop()
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case runErr = <-errc:
			break loop
		case <-c.kick:
			c.rebuild()
		case <-refresh.C:
			c.rebuild()
		}
	}
	undrain := c.drain(2*time.Second, httpL, httpsL)
	if busy := closeServers(servers, open, 5*time.Second, httpL, httpsL); busy > 0 {
		c.log.WithField("connections", busy).Warn("ingress: closing connections still busy after 5s")
	}
	undrain()
	c.queue.ShutDown()
	wg.Wait()
	c.srv.transport.CloseIdleConnections()
	return runErr
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// snapshot collects the informer caches; ours reports which Ingresses we serve.
func (c *controller) snapshot() (Snapshot, map[string]*networkingv1.Ingress) {
	var s Snapshot
	var classes []*networkingv1.IngressClass
	for _, o := range c.classes.List() {
		classes = append(classes, o.(*networkingv1.IngressClass))
	}
	ours := map[string]*networkingv1.Ingress{}
	for _, o := range c.ingresses.List() {
		ing := o.(*networkingv1.Ingress)
		if ok, _ := IsOurs(ing, classes, c.cfg.ClassName); ok {
			s.Ingresses = append(s.Ingresses, ing)
			ours[ing.Namespace+"/"+ing.Name] = ing
		}
	}
	for _, o := range c.services.List() {
		s.Services = append(s.Services, o.(*corev1.Service))
	}
	for _, o := range c.slices.List() {
		s.Slices = append(s.Slices, o.(*discoveryv1.EndpointSlice))
	}
	s.Secrets = c.tlsSecretsOf(s.Ingresses)
	s.ParseCert = c.parseCert
	return s, ours
}

// tlsSecretsOf reads the kubernetes.io/tls Secrets the Ingresses' tls entries name. One
// missing, not read yet or refused is left out: Compile reports it, and the Secret's
// watch rebuilds the tables once it has it.
func (c *controller) tlsSecretsOf(ings []*networkingv1.Ingress) []*corev1.Secret {
	used := map[string]bool{}
	var secrets []*corev1.Secret
	for _, ing := range ings {
		for _, t := range ing.Spec.TLS {
			k := ing.Namespace + "/" + t.SecretName
			if t.SecretName == "" || used[k] {
				continue
			}
			used[k] = true
			sec, err := c.secrets.Get(ing.Namespace, t.SecretName)
			if err != nil {
				if !apierrors.IsNotFound(err) {
					c.log.WithError(err).WithField("secret", k).Debug("TLS Secret not read yet")
				}
				continue
			}
			if sec.Type == corev1.SecretTypeTLS {
				secrets = append(secrets, sec)
			}
		}
	}
	c.tlsSecrets.Store(&used)
	return secrets
}

// parseCert memoizes certificate parsing per Secret version: tables are rebuilt on every
// endpoint change, certificates change rarely.
func (c *controller) parseCert(sec *corev1.Secret) (*tls.Certificate, error) {
	c.certMu.Lock()
	defer c.certMu.Unlock()
	if cc, ok := c.certs[sec.UID]; ok && cc.rv == sec.ResourceVersion {
		return cc.cert, cc.err
	}
	cert, err := ParseTLSSecret(sec)
	c.certs[sec.UID] = cachedCert{rv: sec.ResourceVersion, cert: cert, err: err}
	return cert, err
}

func (c *controller) rebuild() {
	snap, ours := c.snapshot()
	t, problems := Compile(snap)
	c.srv.Swap(t)
	report, recheck := c.problems.update(problems)
	for _, p := range report {
		c.log.WithFields(logrus.Fields{"ingress": p.Ingress, "reason": p.Reason}).Warn(p.Message)
		if ing := ours[p.Ingress]; ing != nil {
			c.recorder.Event(ing, corev1.EventTypeWarning, p.Reason, p.Message)
		}
	}
	if recheck > 0 {
		// recheck is when the earliest waiting problem is due: one timer, moved each time.
		if c.recheck == nil {
			c.recheck = time.AfterFunc(recheck, c.poke)
		} else {
			c.recheck.Reset(recheck)
		}
	}
}

// ProblemGrace is how long a problem of an Ingress must last before it is reported (log and
// Warning Event). Each kind is watched apart, so an Ingress can reach a host's proxy before
// the Service or Secret applied with it, and be compiled without them for a moment.
const ProblemGrace = 5 * time.Second

// problemReporter decides which of the problems a compilation found to report: each once,
// and only when it has lasted ProblemGrace. One that goes away before is never reported; one
// that comes back later starts over.
type problemReporter struct {
	grace time.Duration
	now   func() time.Time
	// seen holds the problems of the last compilation (ns/name, reason and message), with
	// when each was first found and whether it was reported.
	seen map[string]problemSeen
}

type problemSeen struct {
	since    time.Time
	reported bool
}

// update takes the problems of a new compilation. It returns those to report now, and how
// long until the earliest of the others has lasted the grace (0: none is waiting), when the
// caller should compile again.
func (r *problemReporter) update(problems []Problem) (report []Problem, recheck time.Duration) {
	now := r.now()
	next := make(map[string]problemSeen, len(problems))
	for _, p := range problems {
		k := p.Ingress + "\x00" + p.Reason + "\x00" + p.Message
		if _, dup := next[k]; dup {
			continue
		}
		st, ok := r.seen[k]
		if !ok {
			st.since = now
		}
		if !st.reported {
			if wait := r.grace - now.Sub(st.since); wait > 0 {
				if recheck == 0 || wait < recheck {
					recheck = wait
				}
			} else {
				st.reported = true
				report = append(report, p)
			}
		}
		next[k] = st
	}
	r.seen = next
	return report, recheck
}

func (c *controller) processStatus(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.syncStatus(ctx, key); err != nil {
		if ctx.Err() == nil {
			c.log.WithError(err).WithField("ingress", key).Debug("status update failed; retrying")
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// syncStatus makes sure this host's address is in the Ingress's status (merged with the
// other hosts' addresses).
func (c *controller) syncStatus(ctx context.Context, key string) error {
	o, exists, err := c.ingresses.GetByKey(key)
	if err != nil || !exists {
		return err
	}
	ing := o.(*networkingv1.Ingress)
	var classes []*networkingv1.IngressClass
	for _, co := range c.classes.List() {
		classes = append(classes, co.(*networkingv1.IngressClass))
	}
	if ok, _ := IsOurs(ing, classes, c.cfg.ClassName); !ok {
		return nil
	}
	var mine []string
	nodeIPs := map[string]bool{}
	for _, no := range c.nodes.List() {
		n := no.(*corev1.Node)
		for _, ip := range NodeIPs(n) {
			nodeIPs[ip] = true
		}
		if n.Name == c.cfg.NodeName {
			mine = NodeIPs(n)
		}
	}
	if len(mine) == 0 {
		// Until our Node has an address there is nothing true to write; a Node event requeues.
		return nil
	}
	want := MergeStatus(ing.Status.LoadBalancer.Ingress, mine, nodeIPs)
	if apiequality.Semantic.DeepEqual(want, ing.Status.LoadBalancer.Ingress) {
		return nil
	}
	cp := ing.DeepCopy()
	cp.Status.LoadBalancer.Ingress = want
	if _, err := c.client.NetworkingV1().Ingresses(ing.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		// A conflict means another host wrote first: the informer brings the new version and
		// the retry merges into it.
		return fmt.Errorf("update status of Ingress %s: %w", key, err)
	}
	c.log.WithFields(logrus.Fields{"ingress": key, "addresses": len(want)}).Debug("ingress status updated")
	return nil
}
