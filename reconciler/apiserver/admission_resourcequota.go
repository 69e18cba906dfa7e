package apiserver

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	resourcequotaapi "k8s.io/apiserver/pkg/admission/plugin/resourcequota/apis/resourcequota"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/flotilla-dev/flotilla/reconciler/quota"
)

// resourceQuotaPlugin is k8s.io/apiserver's ResourceQuota admission with flotilla's evaluators
// (reconciler/quota): a create (or a Service or claim update) in a namespace with
// ResourceQuotas is refused with 403 "exceeded quota: <name>, requested: ..., used: ...,
// limited: ..." when it would take a quota over its hard limits, and otherwise charged to the
// quota's status.used at once, so that concurrent creates cannot all slip under the limit. The
// resourcequota controller fills status.hard and recomputes status.used (a quota the
// controller has not seen yet refuses what it limits: "status unknown for quota"). A pod in a
// namespace whose quota names cpu or memory must set them on every container ("must specify
// ..."). It is the last validating plugin, as in kube-apiserver: nothing refused later is
// charged.
func resourceQuotaPlugin(f informers.SharedInformerFactory, client kubernetes.Interface, drained <-chan struct{}) (admission.Interface, error) {
	p, err := resourcequota.NewResourceQuota(&resourcequotaapi.Configuration{}, 5)
	if err != nil {
		return nil, fmt.Errorf("ResourceQuota admission: %w", err)
	}
	p.SetDrainedNotification(drained)
	p.SetExternalKubeClientSet(client)
	p.SetExternalKubeInformerFactory(f)
	p.SetQuotaConfiguration(quota.Configuration())
	if err := p.ValidateInitialization(); err != nil {
		return nil, fmt.Errorf("ResourceQuota admission: %w", err)
	}
	inf := f.Core().V1().ResourceQuotas()
	return &quotaFreeNamespaces{QuotaAdmission: p, quotas: inf.Lister(), synced: inf.Informer().HasSynced}, nil
}

// quotaFreeNamespaces lets a write to a namespace without any ResourceQuota through at once.
// The upstream plugin comes to the same answer (with no quota and no limited resources
// configured it admits, trusting its informer once synced), but only after handing the
// request to its per-namespace queue and waiting for a worker: every create of a busy
// namespace took its turn behind the others (a third of the creates in flight waited there
// during make bench-scheduler's burst). Before the informer has synced, and in namespaces
// with quotas, the upstream plugin decides.
type quotaFreeNamespaces struct {
	*resourcequota.QuotaAdmission
	quotas corev1listers.ResourceQuotaLister
	synced func() bool
}

func (q *quotaFreeNamespaces) Validate(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	if ns := a.GetNamespace(); ns != "" && q.synced() {
		if l, err := q.quotas.ResourceQuotas(ns).List(labels.Everything()); err == nil && len(l) == 0 {
			return nil
		}
	}
	return q.QuotaAdmission.Validate(ctx, a, o)
}
