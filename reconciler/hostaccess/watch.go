package hostaccess

import (
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Revocations follows ConfigMap RevokedHostsConfigMap through a watch of that one object.
type Revocations struct {
	informer     cache.SharedIndexInformer
	signBackdate time.Duration
	current      atomic.Pointer[map[string]Revocation]
	onChange     []func(map[string]Revocation)
}

// NewRevocations makes the watch (started by Run). signBackdate is how far before its
// signing the site backdates a certificate (pki.SignBackdate).
func NewRevocations(c kubernetes.Interface, signBackdate time.Duration) *Revocations {
	sel := fields.OneTermEqualSelector("metadata.name", RevokedHostsConfigMap).String()
	inf := coreinformers.NewFilteredConfigMapInformer(c, Namespace, 0, cache.Indexers{}, func(o *metav1.ListOptions) { o.FieldSelector = sel })
	r := &Revocations{informer: inf, signBackdate: signBackdate}
	empty := map[string]Revocation{}
	r.current.Store(&empty)
	_, _ = r.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.set(obj) },
		UpdateFunc: func(_, obj any) { r.set(obj) },
		DeleteFunc: func(any) { r.set(nil) },
	})
	return r
}

// OnChange registers f, called with every new list (before Run).
func (r *Revocations) OnChange(f func(map[string]Revocation)) { r.onChange = append(r.onChange, f) }

func (r *Revocations) set(obj any) {
	cm, _ := obj.(*corev1.ConfigMap)
	revs, err := ParseRevocations(cm)
	if err != nil {
		logrus.WithError(err).Warn("removed hosts")
	}
	r.current.Store(&revs)
	for _, f := range r.onChange {
		f(revs)
	}
}

// Run follows the ConfigMap until stop closes.
func (r *Revocations) Run(stop <-chan struct{}) { r.informer.Run(stop) }

// HasSynced reports whether the ConfigMap was read once.
func (r *Revocations) HasSynced() bool { return r.informer.HasSynced() }

// Current returns the removed hosts (do not modify).
func (r *Revocations) Current() map[string]Revocation { return *r.current.Load() }

// CertRevoked reports whether a client certificate of user starting at notBefore belongs to
// a removed host and was issued before its removal.
func (r *Revocations) CertRevoked(user string, notBefore time.Time) bool {
	return CertRevoked(r.Current(), user, notBefore, r.signBackdate)
}

// Banned reports whether name is removed and not readmitted: gossip ignores it.
func (r *Revocations) Banned(name string) bool {
	rev, ok := r.Current()[name]
	return ok && !rev.Readmitted
}
