package apiserver

import (
	"fmt"

	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	resourcequotaapi "k8s.io/apiserver/pkg/admission/plugin/resourcequota/apis/resourcequota"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

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
	return p, nil
}
