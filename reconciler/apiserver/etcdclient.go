package apiserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"
	"google.golang.org/grpc/connectivity"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/generic"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
)

// The etcd clients of the API server's storage. k8s.io/apiserver's storage factory dials a
// client of its own for every resource it stores (a gRPC connection with its buffers, a
// keepalive, a watch stream and about ten goroutines each, on both ends of the connection):
// some 50 of them in one host's process, for one etcd member it shares the process with.
// sharedEtcd hands every store of a server the one client of its transport instead, as
// upstream's compactor already does; watches of all resources share that client's watch
// stream, as any etcd client's watchers do.

// Dial and keepalive settings of the storage's etcd clients, as k8s.io/apiserver's.
const (
	etcdDialTimeout      = 20 * time.Second
	etcdKeepaliveTime    = 30 * time.Second
	etcdKeepaliveTimeout = 10 * time.Second
)

// sharedEtcd holds the etcd client of each transport (servers and TLS files) while a store
// uses it.
type sharedEtcd struct {
	mu      sync.Mutex
	clients map[string]*sharedEtcdClient
}

type sharedEtcdClient struct {
	client    *etcdkubernetes.Client
	compactor *compactorHandle
	refs      int
}

// compactorHandle is the compactor of a transport, started by its first store that asks for
// compaction (the storage configuration's CompactionInterval, 5 minutes by default).
type compactorHandle struct {
	interval time.Duration
	c        etcd3.Compactor
	stop     func()
}

func newSharedEtcd() *sharedEtcd {
	return &sharedEtcd{clients: map[string]*sharedEtcdClient{}}
}

// acquire returns the client of t (dialling it on first use) and a function that releases
// it; the last release closes it.
func (s *sharedEtcd) acquire(t storagebackend.TransportConfig, compactionInterval time.Duration) (*etcdkubernetes.Client, etcd3.Compactor, func(), error) {
	key := fmt.Sprintf("%v|%s|%s|%s", t.ServerList, t.CertFile, t.KeyFile, t.TrustedCAFile)
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.clients[key]
	if sc == nil {
		client, err := dialStorageEtcd(t)
		if err != nil {
			return nil, nil, nil, err
		}
		// Every request of every store is timed in the API server's etcd latency metrics,
		// as upstream's per-resource clients are.
		client.KV = etcd3.NewETCDLatencyTracker(client.KV)
		sc = &sharedEtcdClient{client: client}
		s.clients[key] = sc
	}
	if compactionInterval > 0 && (sc.compactor == nil || sc.compactor.interval > compactionInterval) {
		if sc.compactor != nil {
			sc.compactor.stop()
		}
		c := etcd3.StartCompactorPerEndpoint(sc.client.Client, compactionInterval)
		sc.compactor = &compactorHandle{interval: compactionInterval, c: c, stop: c.Stop}
	}
	sc.refs++
	var compactor etcd3.Compactor
	if sc.compactor != nil {
		compactor = sc.compactor.c
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			sc.refs--
			if sc.refs > 0 {
				return
			}
			if sc.compactor != nil {
				sc.compactor.stop()
			}
			_ = sc.client.Close()
			delete(s.clients, key)
		})
	}
	return sc.client, compactor, release, nil
}

// dialStorageEtcd dials an etcd client for t and waits until its connection is ready, as
// k8s.io/apiserver's storage does.
func dialStorageEtcd(t storagebackend.TransportConfig) (*etcdkubernetes.Client, error) {
	tlsInfo := transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile}
	tlsConfig, err := tlsInfo.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd client TLS: %w", err)
	}
	if t.CertFile == "" && t.KeyFile == "" && t.TrustedCAFile == "" {
		tlsConfig = nil
	}
	client, err := etcdkubernetes.New(clientv3.Config{
		Endpoints:            t.ServerList,
		TLS:                  tlsConfig,
		DialTimeout:          etcdDialTimeout,
		DialKeepAliveTime:    etcdKeepaliveTime,
		DialKeepAliveTimeout: etcdKeepaliveTimeout,
		Logger:               storageEtcdClientLogger,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", t.ServerList, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), etcdDialTimeout)
	defer cancel()
	conn := client.ActiveConnection()
	for {
		state := conn.GetState()
		if state == connectivity.Ready {
			return client, nil
		}
		if state == connectivity.Idle {
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, state) {
			_ = client.Close()
			return nil, fmt.Errorf("etcd %v not ready: %w", t.ServerList, ctx.Err())
		}
	}
}

// rawStorage is factory.Create on the shared client: the etcd3 store of one resource.
func (s *sharedEtcd) rawStorage(c *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error) {
	if c.Type != storagebackend.StorageTypeUnset && c.Type != storagebackend.StorageTypeETCD3 {
		return nil, nil, fmt.Errorf("storage type %q is not supported (only etcd3)", c.Type)
	}
	client, compactor, release, err := s.acquire(c.Transport, c.CompactionInterval)
	if err != nil {
		return nil, nil, err
	}
	transformer := c.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	decoder := etcd3.NewDefaultDecoder(c.Codec, versioner)
	unsafeDelete := utilfeature.DefaultFeatureGate.Enabled(genericfeatures.AllowUnsafeMalformedObjectDeletion)
	if unsafeDelete {
		transformer = etcd3.WithCorruptObjErrorHandlingTransformer(transformer)
		decoder = etcd3.WithCorruptObjErrorHandlingDecoder(decoder)
	}
	store, err := etcd3.New(client, compactor, c.Codec, newFunc, newListFunc, c.Prefix, resourcePrefix, c.GroupResource, transformer, c.LeaseManagerConfig, decoder, versioner)
	if err != nil {
		release()
		return nil, nil, err
	}
	var once sync.Once
	destroy := func() {
		// Destroy functions are called more than once (subresources share a store).
		once.Do(func() {
			store.Close()
			release()
		})
	}
	var out storage.Interface = store
	if unsafeDelete {
		out = etcd3.NewStoreWithUnsafeCorruptObjectDeletion(out, c.GroupResource)
	}
	return out, destroy, nil
}

// withCacher is genericregistry.StorageWithCacher on the shared client: the resource's etcd3
// store behind a watch cache.
func (s *sharedEtcd) withCacher(c *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(runtime.Object) (string, error),
	newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
	raw, destroyRaw, err := s.rawStorage(c, newFunc, newListFunc, resourcePrefix)
	if err != nil {
		return nil, nil, err
	}
	cacher, err := cacherstorage.NewCacherFromConfig(cacherstorage.Config{
		Storage:             raw,
		Versioner:           storage.APIObjectVersioner{},
		GroupResource:       c.GroupResource,
		EventsHistoryWindow: c.EventsHistoryWindow,
		ResourcePrefix:      resourcePrefix,
		KeyFunc:             keyFunc,
		NewFunc:             newFunc,
		NewListFunc:         newListFunc,
		GetAttrsFunc:        getAttrs,
		IndexerFuncs:        triggers,
		Indexers:            indexers,
		Codec:               c.Codec,
	})
	if err != nil {
		destroyRaw()
		return nil, nil, err
	}
	delegator := cacherstorage.NewCacheDelegator(cacher, raw)
	var once sync.Once
	return delegator, func() {
		once.Do(func() {
			delegator.Stop()
			cacher.Stop()
			destroyRaw()
		})
	}, nil
}

// undecorated is generic.UndecoratedStorage on the shared client.
func (s *sharedEtcd) undecorated(c *storagebackend.ConfigForResource, resourcePrefix string, _ func(runtime.Object) (string, error),
	newFunc, newListFunc func() runtime.Object, _ storage.AttrFunc, _ storage.IndexerFuncs, _ *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
	return s.rawStorage(c, newFunc, newListFunc, resourcePrefix)
}

// options wraps a RESTOptionsGetter configured by etcd (EtcdOptions.ApplyTo or
// ApplyWithStorageFactoryTo) so that its stores use the shared clients. A getter with
// per-resource watch cache sizes is left as it is (flotilla sets none).
func (s *sharedEtcd) options(getter generic.RESTOptionsGetter, etcd genericoptions.EtcdOptions) generic.RESTOptionsGetter {
	if getter == nil || len(etcd.WatchCacheSizes) > 0 {
		return getter
	}
	return sharedEtcdOptions{RESTOptionsGetter: getter, etcd: s, watchCache: etcd.EnableWatchCache}
}

// sharedEtcdOptions are a RESTOptionsGetter's options with storage on the shared clients:
// behind a watch cache when watchCache is set, the etcd3 store alone otherwise.
type sharedEtcdOptions struct {
	generic.RESTOptionsGetter
	etcd       *sharedEtcd
	watchCache bool
}

func (g sharedEtcdOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	// Events are served from etcd without a watch cache, as kube-apiserver serves them by
	// default: written often, read seldom, a cache of them on every host would hold memory
	// for little use.
	if g.watchCache && !eventResources[resource] {
		opts.Decorator = g.etcd.withCacher
	} else {
		opts.Decorator = g.etcd.undecorated
	}
	return opts, nil
}

// rawStorageGetter is what hands out etcd3 stores without a watch cache on the shared
// client (the Service IP and port allocators).
type rawStorageGetter interface {
	rawStorage(c *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error)
}

func (g sharedEtcdOptions) rawStorage(c *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error) {
	return g.etcd.rawStorage(c, newFunc, newListFunc, resourcePrefix)
}
