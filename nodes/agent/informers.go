package agent

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// NodePodInformerFactory returns a factory whose informers see only the pods bound to node
// (field selector spec.nodeName), resync off. A host makes one and gives it to every user of
// its own pods (PodConfig.PodInformers), so they share one watch and one cache instead of each
// holding the pods of the whole cluster or watching them again.
// Further options (e.g. a transform) apply as well.
func NodePodInformerFactory(client kubernetes.Interface, node string, opts ...informers.SharedInformerOption) informers.SharedInformerFactory {
	opts = append(opts, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	return informers.NewSharedInformerFactoryWithOptions(client, 0, opts...)
}
