package host

import (
	"path/filepath"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"

	"github.com/flotilla-dev/flotilla/internal/kubeclient"
	"github.com/flotilla-dev/flotilla/internal/slim"
	"github.com/flotilla-dev/flotilla/nodes/agent"
	"github.com/flotilla-dev/flotilla/nodes/checkpoint"
	"github.com/flotilla-dev/flotilla/nodes/refcache"
	"github.com/flotilla-dev/flotilla/proxy/dns"
)

func (h *Host) checkpointDir() string { return filepath.Join(h.cfg.DataDir, "checkpoint") }

// startIdentities makes (or keeps) the host's certificates and its components' client
// identities, and the node identity's client and informer factories. Every kind the node
// agent, the pod network and the proxies read is checkpointed (see the checkpoint
// package), so that they can start before the API answers.
//
// ConfigMaps, Secrets, PersistentVolumeClaims and PersistentVolumes are not listed: the
// Node authorizer lets a host read only those its pods use (and the Ingresses' TLS
// Secrets), by name, which h.objects does with a watch per object (nodes/refcache); it
// keeps their checkpoints too, in the same files as the informers of earlier versions.
func (h *Host) startIdentities() error {
	if h.cfg.Etcd {
		if err := h.issueCerts(); err != nil {
			return err
		}
		if err := h.issueIdentities(); err != nil {
			return err
		}
	} else if err := h.workerIdentities(); err != nil {
		return err
	}
	cs, err := kubeclient.New(h.ids.node)
	if err != nil {
		return err
	}
	h.client = cs
	if h.checkpoints, err = checkpoint.Open(h.checkpointDir(), logrus.WithFields(logrus.Fields{"host": h.cfg.Name, "component": "checkpoint"})); err != nil {
		return err
	}
	// No subsystem reads managedFields from its cache: dropping them halves what some
	// objects cost to hold (an update that omits them keeps the stored ones).
	h.informers = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(slim.DropManagedFields))
	h.podInformers = agent.NodePodInformerFactory(cs, h.cfg.Name, informers.WithTransform(slim.DropManagedFields))
	h.dnsPodInformers = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(dns.SlimObjects))
	ctx := h.runCtx
	h.checkpoints.Register(ctx, h.informers,
		checkpoint.Typed("nodes", &corev1.Node{}, cs.CoreV1().Nodes(), nil),
		checkpoint.Typed("services", &corev1.Service{}, cs.CoreV1().Services(""), nil),
		checkpoint.Typed("endpointslices", &discoveryv1.EndpointSlice{}, cs.DiscoveryV1().EndpointSlices(""), nil),
		checkpoint.Typed("ingresses", &networkingv1.Ingress{}, cs.NetworkingV1().Ingresses(""), nil),
		checkpoint.Typed("ingressclasses", &networkingv1.IngressClass{}, cs.NetworkingV1().IngressClasses(), nil),
		checkpoint.Typed("namespaces", &corev1.Namespace{}, cs.CoreV1().Namespaces(), nil),
		checkpoint.Typed("networkpolicies", &networkingv1.NetworkPolicy{}, cs.NetworkingV1().NetworkPolicies(""), nil),
	)
	h.checkpoints.Register(ctx, h.podInformers, checkpoint.Typed("pods", &corev1.Pod{}, cs.CoreV1().Pods(""), func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", h.cfg.Name).String()
	}))
	h.checkpoints.Register(ctx, h.dnsPodInformers, checkpoint.Typed("dns-pods", &corev1.Pod{}, cs.CoreV1().Pods(""), nil))
	h.objects = refcache.NewObjects(ctx, cs, refcache.Config{Checkpoint: h.checkpoints,
		Log: logrus.WithFields(logrus.Fields{"host": h.cfg.Name, "component": "objects"})})
	if h.resume {
		h.log.WithField("dir", h.checkpointDir()).Info("starting pods and proxies from the checkpoint; the API takes over when it answers")
	}
	return nil
}
