package serviceaccount

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// Getter reads the objects a token is bound to. The objects returned may be shared with a
// cache: callers must not modify them. A missing object is an apierrors NotFound error.
type Getter interface {
	ServiceAccount(namespace, name string) (*corev1.ServiceAccount, error)
	Pod(namespace, name string) (*corev1.Pod, error)
}

// liveGetTimeout bounds the GET of an object the informer has not seen.
const liveGetTimeout = 10 * time.Second

// NewGetter reads from the informers of factory (which it registers, so call it before the
// factory is started), and through client when the informer does not have the object: one
// created a moment ago may not have reached it yet.
func NewGetter(factory informers.SharedInformerFactory, client kubernetes.Interface) Getter {
	sas, pods := factory.Core().V1().ServiceAccounts(), factory.Core().V1().Pods()
	sas.Informer()
	pods.Informer()
	return &getter{sas: sas.Lister(), pods: pods.Lister(), client: client}
}

type getter struct {
	sas    corelisters.ServiceAccountLister
	pods   corelisters.PodLister
	client kubernetes.Interface
}

func (g *getter) ServiceAccount(namespace, name string) (*corev1.ServiceAccount, error) {
	sa, err := g.sas.ServiceAccounts(namespace).Get(name)
	if !apierrors.IsNotFound(err) || g.client == nil {
		return sa, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveGetTimeout)
	defer cancel()
	return g.client.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (g *getter) Pod(namespace, name string) (*corev1.Pod, error) {
	pod, err := g.pods.Pods(namespace).Get(name)
	if !apierrors.IsNotFound(err) || g.client == nil {
		return pod, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveGetTimeout)
	defer cancel()
	return g.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}
