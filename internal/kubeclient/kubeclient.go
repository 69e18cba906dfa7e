// Package kubeclient builds the clientsets flotilla's own components use for the built-in API
// groups. They speak protobuf, as kube-scheduler and kube-controller-manager do: the API server
// decodes a protobuf body several times faster than JSON and encodes answers and watch events
// in it more cheaply too, which is most of what a burst of creates and bindings costs it.
//
// Only typed clientsets of the built-in groups may use such a configuration: flotilla's own
// group, custom resources and the dynamic client have no protobuf encoding (dynamic.NewForConfig
// and metadata.NewForConfig choose their own content types, so a configuration passed to them
// is left as it is).
package kubeclient

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Protobuf returns a copy of cfg that sends protobuf and accepts protobuf or JSON (the API
// server answers JSON where it has no protobuf encoding, as for a Status from an aggregated API).
func Protobuf(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg
}

// New is kubernetes.NewForConfig speaking protobuf; cfg itself is not changed.
func New(cfg *rest.Config) (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(Protobuf(cfg))
}
