// Package controllers holds what every control loop shares: the clients and informer
// factories of the API, handed to each controller package under reconciler/controllers/<name>/.
// Controllers run only on the holder of the controller Lease (see Manager).
package controllers

import (
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/record"

	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// Context is handed to every controller constructor. The informer factories are started by
// the manager after all controllers are constructed (so register informers in the
// constructor), and stopped when leadership ends.
type Context struct {
	Config            *rest.Config
	Client            kubernetes.Interface
	Dynamic           dynamic.Interface
	Metadata          metadata.Interface
	Discovery         discovery.DiscoveryInterface
	RESTMapper        *restmapper.DeferredDiscoveryRESTMapper
	Informers         informers.SharedInformerFactory
	MetadataInformers metadatainformer.SharedInformerFactory
	// Recorder returns an event recorder that reports as component.
	Recorder func(component string) record.EventRecorder
	// HostDeadSince reports since when gossip considers a host dead (nil when gossip is not
	// available, as in controller tests).
	HostDeadSince func(name string) (time.Time, bool)
	// HostAlive reports whether gossip sees a host alive now (nil without gossip).
	HostAlive func(name string) bool
	// RootCA is the site CA certificate (PEM) that the rootca controller publishes in every
	// namespace as ConfigMap kube-root-ca.crt, for pods to verify the API server.
	RootCA []byte
	// CA is the site CA with its key, with which csrsigning issues the certificates of
	// approved CertificateSigningRequests (nil where the host holds no CA key).
	CA *pki.CA
	// ConfigFor, when set, returns the client configuration of the named controller: its
	// Config, Client, Dynamic and Metadata are built from it, so that it writes as itself
	// with the permissions of its own role. The informers, the REST mapper and the event
	// recorder stay shared.
	ConfigFor func(controller string) *rest.Config
}
