package apiserver

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions/apiextensions/v1"
	apiextensionslisters "k8s.io/apiextensions-apiserver/pkg/client/listers/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"
	apiregistrationclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
	"k8s.io/kube-aggregator/pkg/controllers/autoregister"
)

// aggregatorConfig derives the aggregator's configuration from ours: APIServices stored in
// /registry/apiregistration.k8s.io, and the OpenAPI of the whole chain merged by the
// aggregator's own handler.
func aggregatorConfig(gc genericapiserver.Config, etcd genericoptions.EtcdOptions, shared *sharedEtcd, f informers.SharedInformerFactory,
	services aggregatorapiserver.ServiceResolver) (*aggregatorapiserver.Config, error) {
	gc.PostStartHooks = map[string]genericapiserver.PostStartHookConfigEntry{}
	gc.RESTOptionsGetter = nil
	gc.SkipOpenAPIInstallation = true
	etcd.StorageConfig.Codec = aggregatorscheme.Codecs.LegacyCodec(apiregistrationv1.SchemeGroupVersion)
	etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(apiregistrationv1.SchemeGroupVersion)
	etcd.SkipHealthEndpoints = true
	if err := etcd.ApplyTo(&gc); err != nil {
		return nil, fmt.Errorf("configure APIService storage: %w", err)
	}
	gc.RESTOptionsGetter = shared.options(gc.RESTOptionsGetter, etcd)
	resources := serverstorage.NewResourceConfig()
	resources.EnableVersions(apiregistrationv1.SchemeGroupVersion)
	gc.MergedResourceConfig = resources
	return &aggregatorapiserver.Config{
		GenericConfig: &genericapiserver.RecommendedConfig{Config: gc, SharedInformerFactory: f},
		ExtraConfig:   aggregatorapiserver.ExtraConfig{ServiceResolver: services},
	}, nil
}

// newAggregator puts the aggregator in front of delegate. Every group version the chain
// serves gets a local APIService (created on start, so an administrator may point one at a
// Service, as metrics-server does for metrics.k8s.io), and every CRD version one of its own
// for as long as some CRD serves it.
func newAggregator(cfg *aggregatorapiserver.Config, delegate *genericapiserver.GenericAPIServer,
	crds apiextensionsinformers.CustomResourceDefinitionInformer) (*aggregatorapiserver.APIAggregator, error) {
	agg, err := cfg.Complete().NewWithDelegate(delegate)
	if err != nil {
		return nil, fmt.Errorf("create API aggregator: %w", err)
	}
	client, err := apiregistrationclient.NewForConfig(cfg.GenericConfig.LoopbackClientConfig)
	if err != nil {
		return nil, err
	}
	apiServices := agg.APIRegistrationInformers.Apiregistration().V1().APIServices()
	auto := autoregister.NewAutoRegisterController(apiServices, client)
	local := localGroupVersions(delegate.ListedPaths())
	var names []string
	for _, gv := range local {
		names = append(names, apiServiceName(gv))
	}
	// Not ready until discovery lists every local group: a client that caches discovery
	// (kubectl does) would otherwise miss groups for minutes.
	lister := apiServices.Lister()
	err = agg.GenericAPIServer.AddBootSequenceHealthChecks(healthz.NamedCheck("autoregister-completion", func(*http.Request) error {
		var missing []string
		for _, name := range names {
			if _, err := lister.Get(name); err != nil {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("missing APIServices: %v", missing)
		}
		return nil
	}))
	if err != nil {
		return nil, err
	}
	reg := newCRDRegistration(crds, auto)
	informer := apiServices.Informer()
	err = agg.GenericAPIServer.AddPostStartHook("flotilla-apiservice-registration", func(hc genericapiserver.PostStartHookContext) error {
		go reg.run(hc.Done())
		go func() {
			if !cache.WaitForCacheSync(hc.Done(), informer.HasSynced) {
				return
			}
			for _, gv := range local {
				// A local group an administrator pointed at a Service (metrics-server's
				// v1beta1.metrics.k8s.io) stays theirs.
				if cur, err := lister.Get(apiServiceName(gv)); err == nil && cur.Spec.Service != nil {
					logrus.WithField("apiService", cur.Name).Info("local API group served by a Service of the site instead")
					continue
				}
				auto.AddAPIServiceToSyncOnStart(localAPIService(gv))
			}
			// CRD APIServices must be known before the first sync, or it would delete them.
			if !cache.WaitForCacheSync(hc.Done(), reg.synced) {
				return
			}
			auto.Run(2, hc.Done())
		}()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return agg, nil
}

// localGroupVersions reads the group versions out of the served paths (/api/v1 and
// /apis/<group>/<version>).
func localGroupVersions(paths []string) []schema.GroupVersion {
	var out []schema.GroupVersion
	seen := map[schema.GroupVersion]bool{}
	for _, p := range paths {
		gv, ok := groupVersionOfPath(strings.Trim(p, "/"))
		if ok && !seen[gv] {
			seen[gv] = true
			out = append(out, gv)
		}
	}
	return out
}

// groupVersionOfPath returns the group version a path names: "api/v1" is core v1,
// "apis/apps/v1" apps/v1.
func groupVersionOfPath(path string) (schema.GroupVersion, bool) {
	parts := strings.Split(path, "/")
	switch {
	case len(parts) == 2 && parts[0] == "api":
		return schema.GroupVersion{Version: parts[1]}, true
	case len(parts) == 3 && parts[0] == "apis":
		return schema.GroupVersion{Group: parts[1], Version: parts[2]}, true
	}
	return schema.GroupVersion{}, false
}

// groupPriorities orders the groups in discovery (and so in kubectl's short-name and
// category resolution) as kube-apiserver does; groups not listed come after these.
var groupPriorities = map[string]int32{
	"": 18000, "apps": 17800, "events.k8s.io": 17750, "authentication.k8s.io": 17700,
	"authorization.k8s.io": 17600, "autoscaling": 17500, "batch": 17400, "certificates.k8s.io": 17300,
	"networking.k8s.io": 17200, "policy": 17100, "rbac.authorization.k8s.io": 17000,
	"storage.k8s.io": 16800, "apiextensions.k8s.io": 16700, "admissionregistration.k8s.io": 16700,
	"scheduling.k8s.io": 16600, "coordination.k8s.io": 16500, "node.k8s.io": 16300,
	"discovery.k8s.io": 16200, "flotilla.dev": 15000,
}

func localAPIService(gv schema.GroupVersion) *apiregistrationv1.APIService {
	group, ok := groupPriorities[gv.Group]
	if !ok {
		group = 1000
	}
	version := int32(15)
	if gv.Group == "autoscaling" && gv.Version == "v2" {
		version = 30
	}
	return &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: apiServiceName(gv)},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: gv.Group, Version: gv.Version, GroupPriorityMinimum: group, VersionPriority: version,
		},
	}
}

func apiServiceName(gv schema.GroupVersion) string { return gv.Version + "." + gv.Group }

// crdRegistration keeps a local APIService for every group version some CRD serves.
type crdRegistration struct {
	crds   apiextensionslisters.CustomResourceDefinitionLister
	synced cache.InformerSynced
	auto   interface {
		AddAPIServiceToSync(*apiregistrationv1.APIService)
		RemoveAPIServiceToSync(string)
	}
	queue workqueue.TypedRateLimitingInterface[schema.GroupVersion]
}

func newCRDRegistration(inf apiextensionsinformers.CustomResourceDefinitionInformer, auto autoregister.AutoAPIServiceRegistration) *crdRegistration {
	r := &crdRegistration{
		crds:  inf.Lister(),
		auto:  auto,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[schema.GroupVersion](), workqueue.TypedRateLimitingQueueConfig[schema.GroupVersion]{Name: "crd-apiservices"}),
	}
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
			for _, v := range crd.Spec.Versions {
				r.queue.Add(schema.GroupVersion{Group: crd.Spec.Group, Version: v.Name})
			}
		}
	}
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(old, cur any) { enqueue(old); enqueue(cur) },
		DeleteFunc: enqueue,
	})
	informer := inf.Informer()
	// Synced once the informer has listed and every CRD seen so far is registered.
	r.synced = func() bool { return informer.HasSynced() && r.queue.Len() == 0 }
	return r
}

func (r *crdRegistration) run(stop <-chan struct{}) {
	defer utilruntime.HandleCrash()
	defer r.queue.ShutDown()
	go wait.Until(func() {
		for r.next() {
		}
	}, time.Second, stop)
	<-stop
}

func (r *crdRegistration) next() bool {
	gv, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(gv)
	if err := r.sync(gv); err != nil {
		logrus.WithError(err).WithField("groupVersion", gv.String()).Warn("register CRD group version")
		r.queue.AddRateLimited(gv)
		return true
	}
	r.queue.Forget(gv)
	return true
}

func (r *crdRegistration) sync(gv schema.GroupVersion) error {
	crds, err := r.crds.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if crd.Spec.Group != gv.Group {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if v.Name == gv.Version && v.Served {
				r.auto.AddAPIServiceToSync(&apiregistrationv1.APIService{
					ObjectMeta: metav1.ObjectMeta{Name: apiServiceName(gv)},
					Spec: apiregistrationv1.APIServiceSpec{
						Group: gv.Group, Version: gv.Version, GroupPriorityMinimum: 1000, VersionPriority: 100,
					},
				})
				return nil
			}
		}
	}
	r.auto.RemoveAPIServiceToSync(apiServiceName(gv))
	return nil
}
