package controllers

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/record"

	"github.com/flotilla-dev/flotilla/internal/kubeclient"
	"github.com/flotilla-dev/flotilla/internal/slim"
)

// forController returns a copy of c whose clients use cfg (with c's rate limits unless cfg
// sets its own) and whose informers, REST mapper and recorder are c's.
func (c *Context) forController(cfg *rest.Config) (*Context, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = c.Config.QPS, c.Config.Burst
	}
	out := *c
	out.Config = cfg
	var err error
	if out.Client, err = kubeclient.New(cfg); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if out.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	if out.Metadata, err = metadata.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	return &out, nil
}

// NewContext builds a Context from a client configuration: clients, a discovery-backed REST
// mapper and (not yet started) informer factories without periodic resync.
func NewContext(cfg *rest.Config) (*Context, error) {
	cfg = rest.CopyConfig(cfg)
	// Controllers issue bursts (discovery of every group, cascading deletes); client-go's
	// default of 5 QPS would make a namespace deletion take minutes.
	if cfg.QPS == 0 {
		cfg.QPS = 50
	}
	if cfg.Burst == 0 {
		cfg.Burst = 100
	}
	client, err := kubeclient.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	// Discovery stays uncached (namespace deletion must see every resource served now);
	// the mapper caches and is reset by its users when a kind is not found.
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))

	var (
		once        sync.Once
		broadcaster record.EventBroadcaster
	)
	recorder := func(component string) record.EventRecorder {
		once.Do(func() {
			broadcaster = record.NewBroadcaster()
			broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
		})
		return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
	}

	return &Context{
		Config:     cfg,
		Client:     client,
		Dynamic:    dyn,
		Metadata:   meta,
		Discovery:  disc,
		RESTMapper: mapper,
		// The controllers' caches hold every object of the site (the garbage collector's
		// the metadata of every kind): without managedFields they take far less memory.
		Informers:         informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(slim.DropManagedFields)),
		MetadataInformers: metadatainformer.NewSharedInformerFactoryWithOptions(meta, 0, metadatainformer.WithTransform(slim.DropManagedFields)),
		Recorder:          recorder,
	}, nil
}
