// Package apiserver serves the Kubernetes API of a Flotilla site: the k8s.io/api kinds (and our
// flotilla.dev group) on k8s.io/apiserver's generic registry over etcd, with our own
// defaulting, validation, tables and subresources.
package apiserver

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	aggregated "k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/apiserver/pkg/util/notfoundhandler"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"

	"github.com/flotilla-dev/flotilla/internal/kubeclient"
	"github.com/flotilla-dev/flotilla/internal/slim"
	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/openapi"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
)

// Config is what the agent tells the API server.
type Config struct {
	// BindAddress and Port are where the API listens (TLS).
	BindAddress net.IP
	Port        int
	// AdvertiseAddress is the address other hosts and clients use.
	AdvertiseAddress net.IP
	// ServingCertFile and ServingKeyFile are the API's TLS certificate, signed by the site CA.
	ServingCertFile, ServingKeyFile string
	// Etcd is where objects are stored.
	Etcd EtcdClientConfig
	// Tokens maps bearer tokens to users.
	Tokens map[string]*user.DefaultInfo
	// ClientCAFile is the CA whose client certificates authenticate users: the common
	// name is the user, the organizations its groups ("" for none).
	ClientCAFile string
	// ServiceAccountKey signs and verifies ServiceAccount tokens (nil: TokenRequest is
	// refused and no ServiceAccount token authenticates). Every host of a site must use
	// the same key.
	ServiceAccountKey ed25519.PrivateKey
	// MaxTokenLifetime caps the lifetime of the ServiceAccount tokens issued (longer
	// requests are shortened, with a warning); 48h when 0.
	MaxTokenLifetime time.Duration
	// RedactionKey keys the digests that replace Secret values for plan-only users (the
	// same on every host, so that a plan compares digests made by any of them).
	RedactionKey []byte
	// Validation carries the service CIDR and node port range.
	Validation validation.Options
	// DefaultTolerationSeconds is the tolerationSeconds of the node.kubernetes.io/not-ready and
	// unreachable NoExecute tolerations added to new pods (300 like Kubernetes; negative: none).
	DefaultTolerationSeconds int64
	// EventTTL is how long an Event is kept after its last write (its etcd lease);
	// DefaultEventTTL when 0, like kube-apiserver's --event-ttl.
	EventTTL time.Duration
	// PodSecurityDefault is the Pod Security Standards level (privileged, baseline or
	// restricted, version latest) enforced and warned about in namespaces without
	// pod-security.kubernetes.io labels; DefaultPodSecurityLevel when empty.
	PodSecurityDefault string
	// Policies are the objects of the built-in admission policy set (ValidatingAdmissionPolicies,
	// their bindings and param objects, of kinds this server serves), created at start when
	// absent and never updated: users edit or delete them as any object.
	Policies []*unstructured.Unstructured
	// Unauthenticated handlers are served before the authentication chain, by exact path,
	// or by prefix for keys ending in "/" (the join protocol and git webhooks authenticate
	// themselves).
	Unauthenticated map[string]http.Handler
	// Nodes is how pods/log reaches the node agents.
	Nodes NodeConnection
	// Audit is the audit log (a zero value writes none).
	Audit AuditConfig
	// SecretsEncryptionKey (32 bytes) encrypts Secrets in etcd (secretbox, key name
	// SecretsKeyName); Secrets stored before still read. Every host of a site must use the
	// same key. nil: Secrets are stored in clear.
	SecretsEncryptionKey []byte
	// EncryptionProviderConfigFile is an EncryptionConfiguration (apiserver.config.k8s.io/v1,
	// kube-apiserver's --encryption-provider-config); it replaces SecretsEncryptionKey.
	EncryptionProviderConfigFile string
}

// EtcdClientConfig locates the etcd cluster and the client certificate for it.
type EtcdClientConfig struct {
	Servers                   []string
	CAFile, CertFile, KeyFile string
}

// Server is a configured API server, ready to Run.
type Server struct {
	aggregator *aggregatorapiserver.APIAggregator
	informer   informers.SharedInformerFactory
	// Loopback is a privileged client configuration for in-process users of the API.
	Loopback *restclient.Config
}

// SystemNamespaces are created on start and can never be deleted.
var SystemNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}

// writes counts the requests other than reads (GET, HEAD, OPTIONS) that the API servers of
// this process have authenticated and authorized.
var writes atomic.Uint64

// Writes returns how many requests other than reads the API servers of this process have let
// through authentication and authorization so far: the agent's memory policy gives the heap
// more room during a burst of them.
func Writes() uint64 { return writes.Load() }

func countWrites(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			writes.Add(1)
		}
		h.ServeHTTP(w, r)
	})
}

// New builds the API server.
func New(cfg Config) (*Server, error) {
	scheme := NewScheme()
	codecs := serializer.NewCodecFactory(scheme)

	gc := genericapiserver.NewConfig(codecs)
	gc.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	gc.PublicAddress = cfg.AdvertiseAddress
	gc.ShutdownWatchTerminationGracePeriod = 0
	// Requests made with a host's certificate are tracked, so that removing the host ends
	// them (its watches included), not only the requests it makes next.
	nodeReqs := newNodeRequests()
	gc.BuildHandlerChainFunc = func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		chain := nodeReqs.wrap(genericapiserver.DefaultBuildHandlerChain(countWrites(apiHandler), c))
		if len(cfg.Unauthenticated) == 0 {
			return chain
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h, ok := cfg.Unauthenticated[r.URL.Path]; ok {
				h.ServeHTTP(w, r)
				return
			}
			for prefix, h := range cfg.Unauthenticated {
				if strings.HasSuffix(prefix, "/") && strings.HasPrefix(r.URL.Path, prefix) {
					h.ServeHTTP(w, r)
					return
				}
			}
			chain.ServeHTTP(w, r)
		})
	}

	serving := genericoptions.NewSecureServingOptions().WithLoopback()
	serving.BindAddress = cfg.BindAddress
	serving.BindPort = cfg.Port
	serving.ServerCert.CertKey.CertFile = cfg.ServingCertFile
	serving.ServerCert.CertKey.KeyFile = cfg.ServingKeyFile
	if err := serving.ApplyTo(&gc.SecureServing, &gc.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("configure serving on %s:%d: %w", cfg.BindAddress, cfg.Port, err)
	}

	client, err := kubeclient.New(gc.LoopbackClientConfig)
	if err != nil {
		return nil, fmt.Errorf("loopback client: %w", err)
	}
	informerFactory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, informers.WithTransform(withTypeMeta))

	auth, err := newSiteAuth(cfg, informerFactory, client, &gc.SecureServing)
	if err != nil {
		return nil, err
	}
	if auth.revoked != nil {
		auth.revoked.OnChange(nodeReqs.endRevoked)
	}
	gc.Authentication.Authenticator = auth.authn
	gc.Authentication.APIAudiences = auth.apiAudiences
	gc.Authorization.Authorizer = auth.authz
	gc.RuleResolver = auth.rbac
	genericapiserver.AuthorizeClientBearerToken(gc.LoopbackClientConfig, &gc.Authentication, &gc.Authorization)

	if err := applyAudit(gc, cfg.Audit); err != nil {
		return nil, err
	}

	// One aggregated discovery document for the whole chain: every server adds its groups.
	gc.AggregatedDiscoveryGroupManager = aggregated.NewResourceManager("apis")

	namer := openapi.Namer(scheme, apiextensionsapiserver.Scheme, aggregatorscheme.Scheme)
	gc.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(definitions, namer)
	gc.OpenAPIConfig.Info.Title = openapi.Title
	gc.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(definitions, namer)
	gc.OpenAPIV3Config.Info.Title = openapi.Title

	etcdOpts := genericoptions.NewEtcdOptions(storagebackend.NewDefaultConfig("/registry", nil))
	etcdOpts.StorageConfig.Transport.ServerList = cfg.Etcd.Servers
	etcdOpts.StorageConfig.Transport.TrustedCAFile = cfg.Etcd.CAFile
	etcdOpts.StorageConfig.Transport.CertFile = cfg.Etcd.CertFile
	etcdOpts.StorageConfig.Transport.KeyFile = cfg.Etcd.KeyFile
	etcdOpts.DefaultStorageMediaType = runtime.ContentTypeJSON
	resourceConfig := serverstorage.NewResourceConfig()
	resourceConfig.EnableVersions(servedGroupVersions()...)
	gc.MergedResourceConfig = resourceConfig
	// Built-in kinds are stored in protobuf, as kube-apiserver stores them: every write encodes
	// the object and every read and watch event decodes it, several times faster than JSON.
	// Objects written as JSON by earlier versions stay readable (the storage decoder recognizes
	// both), and so does protobuf by them. flotilla.dev kinds have no protobuf encoding.
	factory := serverstorage.NewDefaultStorageFactory(etcdOpts.StorageConfig, runtime.ContentTypeProtobuf, codecs,
		serverstorage.NewDefaultResourceEncodingConfigForEffectiveVersion(scheme, gc.EffectiveVersion), resourceConfig, nil)
	for _, r := range servedResources() {
		if r.gv.Group == flotillav1alpha1.GroupName {
			factory.SetSerializer(r.groupResource(), runtime.ContentTypeJSON, nil)
		}
	}
	// Upstream stores core and events.k8s.io Events once and converts between them; without
	// internal types to convert through, each API keeps its own keys.
	factory.SetResourceEtcdPrefix(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "events.k8s.io/events")
	if err := applyEncryption(gc, etcdOpts, cfg.EncryptionProviderConfigFile, cfg.SecretsEncryptionKey); err != nil {
		return nil, err
	}
	if err := etcdOpts.ApplyWithStorageFactoryTo(factory, gc); err != nil {
		return nil, fmt.Errorf("configure etcd storage %v: %w", cfg.Etcd.Servers, err)
	}
	// One etcd client for every store of the chain (see sharedEtcd).
	sharedClients := newSharedEtcd()
	gc.RESTOptionsGetter = sharedClients.options(gc.RESTOptionsGetter, *etcdOpts)

	hooks, err := newWebhookDeps(informerFactory, gc.LoopbackClientConfig)
	if err != nil {
		return nil, err
	}
	podSecurity, err := newPodSecurityPlugin(informerFactory, client, cfg.PodSecurityDefault)
	if err != nil {
		return nil, err
	}
	policies, err := newPolicyDeps(gc.LoopbackClientConfig, gc.DrainedNotify())
	if err != nil {
		return nil, err
	}
	plugins, err := admissionPlugins(informerFactory, client, hooks, policies, auth.rbac, auth.authz, podSecurity)
	if err != nil {
		return nil, err
	}
	gc.AdmissionControl = reinvokingChain{admission.NewChainHandler(plugins...)}

	// The apiextensions server is derived from ours before ours is completed.
	extCfg, err := extensionsConfig(*gc, *etcdOpts, sharedClients, informerFactory, hooks.services, hooks.auth)
	if err != nil {
		return nil, err
	}
	extensions, err := extCfg.Complete().New(genericapiserver.NewEmptyDelegateWithCustomHandler(
		notfoundhandler.New(codecs, genericapifilters.NoMuxAndDiscoveryIncompleteKey)))
	if err != nil {
		return nil, fmt.Errorf("create CustomResourceDefinition API server: %w", err)
	}

	aggCfg, err := aggregatorConfig(*gc, *etcdOpts, sharedClients, informerFactory, hooks.services)
	if err != nil {
		return nil, err
	}

	// Ours publishes its OpenAPI documents itself, once its groups are installed (installOpenAPI).
	gc.SkipOpenAPIInstallation = true
	completed := gc.Complete(informerFactory)
	generic, err := completed.New("flotilla-apiserver", extensions.GenericAPIServer)
	if err != nil {
		return nil, fmt.Errorf("create API server: %w", err)
	}
	if err := installAPIs(generic, scheme, codecs, gc.RESTOptionsGetter, cfg.Validation, cfg.DefaultTolerationSeconds, cfg.EventTTL, cfg.Nodes, authDeps{redactionKey: cfg.RedactionKey, tokens: auth.tokens,
		authz: gc.Authorization.Authorizer, admit: gc.AdmissionControl}); err != nil {
		return nil, err
	}
	if err := installReviewAPIs(generic, scheme, codecs, gc.Authentication.Authenticator, gc.Authentication.APIAudiences, gc.Authorization.Authorizer, auth.rbac); err != nil {
		return nil, err
	}
	if err := installOpenAPI(generic, gc.OpenAPIConfig, gc.OpenAPIV3Config); err != nil {
		return nil, err
	}
	// /readyz waits for this hook: until the informers (RBAC's among them) are in sync, the
	// authorizer would refuse everyone but system:masters, and a host's components that
	// start before the API (from their checkpoint) would take those 403s for answers.
	generic.AddPostStartHookOrDie("flotilla-start-informers", func(hc genericapiserver.PostStartHookContext) error {
		informerFactory.Start(hc.Done())
		informerFactory.WaitForCacheSync(hc.Done())
		if auth.revoked != nil {
			go auth.revoked.Run(hc.Done())
			cache.WaitForCacheSync(hc.Done(), auth.revoked.HasSynced)
		}
		return nil
	})
	disc, err := discovery.NewDiscoveryClientForConfig(gc.LoopbackClientConfig)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	typeChecker := newPolicyTypeChecker(client, informerFactory, policies, disc, scheme, apiextensionsapiserver.Scheme, aggregatorscheme.Scheme)
	generic.AddPostStartHookOrDie("flotilla-policy-type-checking", func(hc genericapiserver.PostStartHookContext) error {
		go typeChecker.run(hc)
		return nil
	})
	generic.AddPostStartHookOrDie("flotilla-bootstrap-objects", func(hc genericapiserver.PostStartHookContext) error {
		return ensureBootstrapObjects(hc, client)
	})
	if len(cfg.Policies) > 0 {
		generic.AddPostStartHookOrDie("flotilla-bootstrap-policies", func(hc genericapiserver.PostStartHookContext) error {
			return ensurePolicies(hc, hc.LoopbackClientConfig, cfg.Policies)
		})
	}
	generic.AddPostStartHookOrDie("flotilla-bootstrap-rbac", func(hc genericapiserver.PostStartHookContext) error {
		return reconcileBootstrapPolicy(hc, client, informerFactory)
	})
	// The aggregator comes last: it takes over the post-start hooks of the servers behind it.
	agg, err := newAggregator(aggCfg, generic, extensions.Informers.Apiextensions().V1().CustomResourceDefinitions())
	if err != nil {
		return nil, err
	}
	s := &Server{aggregator: agg, informer: informerFactory, Loopback: gc.LoopbackClientConfig}
	return s, nil
}

// Destroy closes the storage clients (after Run has returned).
func (s *Server) Destroy() { s.aggregator.GenericAPIServer.Destroy() }

// Run serves until ctx is cancelled.
func (s *Server) Run(ctx context.Context) error {
	prepared, err := s.aggregator.PrepareRun()
	if err != nil {
		return fmt.Errorf("prepare API server: %w", err)
	}
	return prepared.Run(ctx)
}

// authDeps is what the storages need of authentication: the key of Secret redaction for
// planners and the issuer of ServiceAccount tokens (nil: no TokenRequest).
type authDeps struct {
	redactionKey []byte
	tokens       *TokenIssuer
	// authz and admit authorize and admit each binding of a BindingBatch as a pods/binding
	// create of its own.
	authz authorizer.Authorizer
	admit admission.Interface
}

// installAPIs creates the storage of every served resource and installs the API groups.
func installAPIs(s *genericapiserver.GenericAPIServer, scheme *runtime.Scheme, codecs serializer.CodecFactory, optsGetter generic.RESTOptionsGetter, vopts validation.Options, tolerationSeconds int64, eventTTL time.Duration, nodes NodeConnection, ad authDeps) error {
	groups := map[string]*genericapiserver.APIGroupInfo{}
	var order []string
	stores := map[schema.GroupResource]*store{}
	strategies := map[schema.GroupResource]*strategy{}
	for _, r := range servedResources() {
		info, ok := groups[r.gv.Group]
		if !ok {
			gi := genericapiserver.NewDefaultAPIGroupInfo(r.gv.Group, scheme, podOptionsCodec{metav1.ParameterCodec}, codecs)
			if r.gv.Group == flotillav1alpha1.GroupName {
				gi.NegotiatedSerializer = jsonOnly{gi.NegotiatedSerializer}
			}
			info = &gi
			groups[r.gv.Group] = info
			order = append(order, r.gv.Group)
		}
		st, strat, err := newStore(scheme, r, optsGetter, vopts)
		if err != nil {
			return err
		}
		strat.defaultTolerationSeconds = tolerationSeconds
		if eventResources[r.groupResource()] {
			st.TTLFunc = eventTTLFunc(eventTTL)
		}
		if r.groupResource() == corev1.Resource("services") {
			alloc, err := newServiceAllocators(optsGetter, vopts.ServiceCIDR, vopts.NodePortMin, vopts.NodePortMax)
			if err != nil {
				return err
			}
			alloc.install(st)
			if err := s.AddPostStartHook("flotilla-service-allocation-repair", alloc.repairHook(listServices(st))); err != nil {
				return err
			}
		}
		wrapped := &store{Store: st, shortNames: r.shortNames, categories: r.categories}
		stores[r.groupResource()] = wrapped
		strategies[r.groupResource()] = strat
		m := info.VersionedResourcesStorageMap[r.gv.Version]
		if m == nil {
			m = map[string]rest.Storage{}
			info.VersionedResourcesStorageMap[r.gv.Version] = m
		}
		m[r.plural] = wrapped
		if r.status {
			m[r.plural+"/status"] = newStatusREST(st, strat)
		}
		if r.scale != nil {
			m[r.plural+"/scale"] = &scaleREST{store: st, access: r.scale, gr: r.groupResource()}
		}
		for sub, rs := range extraSubresources(r, st, strat) {
			m[r.plural+"/"+sub] = rs
		}
	}
	installDefaultStorageClass(strategies[corev1.Resource("persistentvolumeclaims")],
		stores[schema.GroupResource{Group: "storage.k8s.io", Resource: "storageclasses"}].Store)
	core := groups[""].VersionedResourcesStorageMap["v1"]
	podStore := stores[corev1.Resource("pods")]
	binding := &bindingREST{pods: podStore.Store}
	core["pods/binding"] = binding
	groups[flotillav1alpha1.GroupName].VersionedResourcesStorageMap[flotillav1alpha1.SchemeGroupVersion.Version]["bindingbatches"] =
		&bindingBatchREST{binding: binding, authz: ad.authz, admit: ad.admit, objects: admission.NewObjectInterfacesFromScheme(scheme)}
	core["pods/eviction"] = &evictionREST{pods: podStore.Store, pdbs: stores[schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"}].Store}
	dialer, err := newNodeDialer(podStore, stores[corev1.Resource("nodes")], nodes)
	if err != nil {
		return err
	}
	core["pods/log"] = &podLogREST{d: dialer}
	core["pods/exec"] = &podExecREST{d: dialer}
	core["pods/portforward"] = &podPortForwardREST{d: dialer}
	core["secrets"] = &redactedSecrets{store: stores[corev1.Resource("secrets")], key: ad.redactionKey}
	if ad.tokens != nil {
		core["serviceaccounts/token"] = tokenRequestStorage(ad.tokens)
	}
	nsStore := stores[corev1.Resource("namespaces")]
	core["namespaces"] = &namespaceREST{store: nsStore}
	core["namespaces/finalize"] = newFinalizeREST(nsStore.Store, strategies[corev1.Resource("namespaces")])

	if err := s.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, groups[""]); err != nil {
		return fmt.Errorf("install core API: %w", err)
	}
	var infos []*genericapiserver.APIGroupInfo
	for _, g := range order {
		if g != "" {
			infos = append(infos, groups[g])
		}
	}
	if err := s.InstallAPIGroups(infos...); err != nil {
		return fmt.Errorf("install API groups: %w", err)
	}
	forgetOpenAPIModels(append(infos, groups[""])...)
	if err := installMetricsAPI(s, scheme, codecs, podStore, stores[corev1.Resource("nodes")], nodes); err != nil {
		return err
	}
	return nil
}

// withTypeMeta fills in the kind and apiVersion of the objects the server's own informers
// hold, which decoding into Go types leaves empty. The validating-policy plugin wraps a
// param object without them (a ConfigMap of the library policies) in a type that converts
// the whole object to a map every time a policy is evaluated, for every write it matches;
// with them, CEL reads only the fields an expression uses, from the object itself.
func withTypeMeta(obj any) (any, error) {
	// The admission plugins' caches never read managedFields either.
	obj, _ = slim.DropManagedFields(obj)
	o, ok := obj.(runtime.Object)
	if !ok || !o.GetObjectKind().GroupVersionKind().Empty() {
		return obj, nil
	}
	if gvks, _, err := clientscheme.Scheme.ObjectKinds(o); err == nil && len(gvks) > 0 {
		o.GetObjectKind().SetGroupVersionKind(gvks[0])
	}
	return obj, nil
}
