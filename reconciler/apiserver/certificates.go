package apiserver

import (
	"context"
	"fmt"
	"reflect"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
)

// CertificateSigningRequests behave as upstream's pkg/registry/certificates: the requesting
// user is recorded on create, the main resource changes metadata only, /status sets the
// certificate and the conditions other than Approved/Denied, and /approval sets the conditions.
// The controllers csrapproving and csrsigning approve and sign them.

var csrResource = schema.GroupResource{Group: certificatesv1.GroupName, Resource: "certificatesigningrequests"}

// extraSubresources returns the subresources of r besides status and scale, by subresource
// name; installAPIs serves each at r.plural + "/" + name. Only certificatesigningrequests has
// one: approval.
func extraSubresources(r resource, main *genericregistry.Store, strat *strategy) map[string]rest.Storage {
	if r.groupResource() == csrResource {
		return map[string]rest.Storage{"approval": newApprovalREST(main, strat)}
	}
	return nil
}

// csrHooks installs the CertificateSigningRequest behaviour on its strategy.
func csrHooks(s *strategy) {
	s.prepareCreate = func(ctx context.Context, obj runtime.Object) {
		csr := obj.(*certificatesv1.CertificateSigningRequest)
		// Upstream keeps no generation for CSRs.
		csr.Generation = 0
		// Who asked is the authenticated user, whatever the request says.
		csr.Spec.Username, csr.Spec.UID, csr.Spec.Groups, csr.Spec.Extra = "", "", nil, nil
		if u, ok := genericapirequest.UserFrom(ctx); ok {
			csr.Spec.Username = u.GetName()
			csr.Spec.UID = u.GetUID()
			csr.Spec.Groups = append([]string(nil), u.GetGroups()...)
			if extra := u.GetExtra(); len(extra) > 0 {
				csr.Spec.Extra = map[string]certificatesv1.ExtraValue{}
				for k, v := range extra {
					csr.Spec.Extra[k] = append(certificatesv1.ExtraValue(nil), v...)
				}
			}
		}
		// A request is never created approved.
		csr.Status = certificatesv1.CertificateSigningRequestStatus{}
	}
	s.prepareUpdate = func(ctx context.Context, obj, old runtime.Object) {
		csr, oldCSR := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
		// The request is immutable; status changes go through /status and /approval.
		csr.Spec = *oldCSR.Spec.DeepCopy()
		csr.Status = *oldCSR.Status.DeepCopy()
		csr.Generation = oldCSR.Generation
	}
	s.prepareStatusUpdate = func(ctx context.Context, obj, old runtime.Object) {
		csr, oldCSR := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
		// The approval is kept as it was; adding or removing an Approved/Denied condition here
		// fails validation.
		preserveConditionInstances(csr, oldCSR, certificatesv1.CertificateApproved)
		preserveConditionInstances(csr, oldCSR, certificatesv1.CertificateDenied)
		populateConditionTimestamps(csr, oldCSR, metav1.Now())
	}
	s.resetFields = fieldpath.NewSet(fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("status"))
	s.statusResetFields = fieldpath.NewSet(fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("status", "conditions"))
}

// preserveConditionInstances puts back the old instances of a condition type when the update
// has as many of them.
func preserveConditionInstances(csr, old *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) {
	oldIdx, newIdx := conditionIndices(old, t), conditionIndices(csr, t)
	if len(oldIdx) != len(newIdx) {
		return
	}
	for i, oi := range oldIdx {
		csr.Status.Conditions[newIdx[i]] = *old.Status.Conditions[oi].DeepCopy()
	}
}

func conditionIndices(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) []int {
	var out []int
	for i, c := range csr.Status.Conditions {
		if c.Type == t {
			out = append(out, i)
		}
	}
	return out
}

// populateConditionTimestamps sets a missing lastUpdateTime to now, and a missing
// lastTransitionTime to that of the same type and status in old, or now.
func populateConditionTimestamps(csr, old *certificatesv1.CertificateSigningRequest, now metav1.Time) {
	for i := range csr.Status.Conditions {
		c := &csr.Status.Conditions[i]
		if c.LastUpdateTime.IsZero() {
			c.LastUpdateTime = now
		}
		if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = now
			for _, oc := range old.Status.Conditions {
				if oc.Type == c.Type && oc.Status == c.Status && !oc.LastTransitionTime.IsZero() {
					c.LastTransitionTime = oc.LastTransitionTime
					break
				}
			}
		}
	}
}

// csrApprovalStrategy is the strategy of certificatesigningrequests/approval: only
// status.conditions change.
type csrApprovalStrategy struct {
	*strategy
}

func (s csrApprovalStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	csr, oldCSR := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
	populateConditionTimestamps(csr, oldCSR, metav1.Now())
	conditions := csr.Status.Conditions
	csr.Spec = *oldCSR.Spec.DeepCopy()
	csr.Status = *oldCSR.Status.DeepCopy()
	csr.Status.Conditions = conditions
	csr.Generation = oldCSR.Generation
}

func (s csrApprovalStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	oldCSR, ok2 := old.(*certificatesv1.CertificateSigningRequest)
	if !ok || !ok2 {
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("approval: expected CertificateSigningRequests, got %T and %T", obj, old))}
	}
	return validation.ValidateCertificateSigningRequestApprovalUpdate(csr, oldCSR)
}

func (s csrApprovalStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(s.gvk.GroupVersion().String()): fieldpath.NewSet(
			fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("status", "certificate")),
	}
}

// newApprovalREST serves certificatesigningrequests/approval on the main resource's storage,
// like newStatusREST does for /status.
func newApprovalREST(main *genericregistry.Store, strat *strategy) *statusREST {
	return newSubresourceREST(main, csrApprovalStrategy{strat})
}

// webhookConfigurationHooks counts generations of Validating and MutatingWebhookConfigurations
// as upstream does: 1 on create, +1 when the webhooks change.
func webhookConfigurationHooks(s *strategy) {
	s.prepareCreate = func(ctx context.Context, obj runtime.Object) {
		objectMeta(obj).SetGeneration(1)
	}
	s.prepareUpdate = func(ctx context.Context, obj, old runtime.Object) {
		nw, ow := fieldValue(obj, "Webhooks"), fieldValue(old, "Webhooks")
		if nw.IsValid() && ow.IsValid() && !reflect.DeepEqual(nw.Interface(), ow.Interface()) {
			objectMeta(obj).SetGeneration(objectMeta(old).GetGeneration() + 1)
		}
	}
}
