package apiserver

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"

	"github.com/flotilla-dev/flotilla/reconciler/authn/serviceaccount"
)

// TokenIssuer is what serviceaccounts/token needs to issue ServiceAccount tokens.
type TokenIssuer struct {
	// Signer signs the tokens; every API server of a site has the same key.
	Signer *serviceaccount.Signer
	// Getter reads the ServiceAccounts and pods tokens are bound to.
	Getter serviceaccount.Getter
	// APIAudiences are the audiences of tokens for the API itself, given to a TokenRequest
	// that names none (default: the Signer's issuer, as in Kubernetes).
	APIAudiences []string
	// MinLifetime and MaxLifetime bound a TokenRequest's spec.expirationSeconds: shorter is
	// refused, longer is shortened (0: 10 minutes and 48 hours).
	MinLifetime, MaxLifetime time.Duration
}

const (
	defaultTokenMinLifetime = 10 * time.Minute
	defaultTokenMaxLifetime = 48 * time.Hour
	// defaultTokenExpirationSeconds is the lifetime of a TokenRequest that asks for none.
	defaultTokenExpirationSeconds = 3600
	// maxTokenExpirationSeconds is the longest lifetime that validates, as in Kubernetes.
	maxTokenExpirationSeconds = 1 << 32
)

// tokenRequestStorage serves serviceaccounts/token with ti, its zero fields defaulted (the API
// audiences to the Signer's issuer, the lifetimes to 10 minutes and 48 hours).
func tokenRequestStorage(ti *TokenIssuer) rest.Storage {
	c := *ti
	if len(c.APIAudiences) == 0 && c.Signer != nil {
		c.APIAudiences = []string{c.Signer.Issuer()}
	}
	if c.MinLifetime <= 0 {
		c.MinLifetime = defaultTokenMinLifetime
	}
	if c.MaxLifetime <= 0 {
		c.MaxLifetime = defaultTokenMaxLifetime
	}
	return &tokenRequestREST{ti: &c}
}

// tokenRequestREST serves serviceaccounts/token as Kubernetes does: a create of a
// TokenRequest returns a token of the ServiceAccount for the requested audiences and
// lifetime, bound to a pod of that ServiceAccount when spec.boundObjectRef names one. Nothing
// is stored.
type tokenRequestREST struct {
	ti *TokenIssuer
}

var (
	_ rest.NamedCreater             = &tokenRequestREST{}
	_ rest.GroupVersionKindProvider = &tokenRequestREST{}
)

var tokenRequestKind = authenticationv1.SchemeGroupVersion.WithKind("TokenRequest")

func (r *tokenRequestREST) New() runtime.Object { return &authenticationv1.TokenRequest{} }
func (r *tokenRequestREST) Destroy()            {}

func (r *tokenRequestREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return tokenRequestKind
}

func (r *tokenRequestREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
	req, ok := obj.(*authenticationv1.TokenRequest)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a TokenRequest object: %T", obj))
	}
	namespace, ok := genericapirequest.NamespaceFrom(ctx)
	if !ok || namespace == "" {
		return nil, apierrors.NewBadRequest("namespace is required")
	}
	if req.Name != "" && req.Name != name {
		return nil, apierrors.NewInvalid(tokenRequestKind.GroupKind(), name, field.ErrorList{
			field.Invalid(field.NewPath("metadata", "name"), req.Name, "must match the service account name if specified")})
	}
	if req.Namespace != "" && req.Namespace != namespace {
		return nil, apierrors.NewInvalid(tokenRequestKind.GroupKind(), name, field.ErrorList{
			field.Invalid(field.NewPath("metadata", "namespace"), req.Namespace, "must match the service account namespace if specified")})
	}
	sa, err := r.ti.Getter.ServiceAccount(namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(corev1.Resource("serviceaccounts"), name)
	}
	if err != nil {
		return nil, lookupError(err)
	}

	req = req.DeepCopy()
	req.Name, req.Namespace = sa.Name, sa.Namespace
	req.CreationTimestamp = metav1.Now()
	req.Status = authenticationv1.TokenRequestStatus{}
	if len(req.Spec.Audiences) == 0 {
		req.Spec.Audiences = append([]string(nil), r.ti.APIAudiences...)
	}
	if req.Spec.ExpirationSeconds == nil {
		req.Spec.ExpirationSeconds = new(int64(defaultTokenExpirationSeconds))
	}
	if errs := r.validate(req); len(errs) > 0 {
		return nil, apierrors.NewInvalid(tokenRequestKind.GroupKind(), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, req.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	pod, err := r.boundPod(namespace, name, req.Spec.BoundObjectRef)
	if err != nil {
		return nil, err
	}
	if limit := int64(r.ti.MaxLifetime / time.Second); *req.Spec.ExpirationSeconds > limit {
		warning.AddWarning(ctx, "", fmt.Sprintf("requested expiration of %d seconds shortened to %d seconds", *req.Spec.ExpirationSeconds, limit))
		req.Spec.ExpirationSeconds = new(limit)
	}
	// A dry-run checks the request and issues nothing: a plan-only user gets no token.
	if opts != nil && len(opts.DryRun) > 0 {
		return req, nil
	}
	token, expires, err := r.ti.Signer.Issue(sa, pod, req.Spec.Audiences, time.Duration(*req.Spec.ExpirationSeconds)*time.Second)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	req.Status = authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(expires)}
	return req, nil
}

// validate checks the lifetime, as Kubernetes' validation does with the configured minimum.
func (r *tokenRequestREST) validate(req *authenticationv1.TokenRequest) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec", "expirationSeconds")
	switch es := *req.Spec.ExpirationSeconds; {
	case es < int64(r.ti.MinLifetime/time.Second):
		errs = append(errs, field.Invalid(p, es, "may not specify a duration less than "+spelledDuration(r.ti.MinLifetime)))
	case es > maxTokenExpirationSeconds:
		errs = append(errs, field.Invalid(p, es, "may not specify a duration larger than 2^32 seconds"))
	}
	return errs
}

// boundPod returns the pod spec.boundObjectRef names (nil when it names none): only pods
// running as the ServiceAccount can be bound, the UID must be the pod's when given.
func (r *tokenRequestREST) boundPod(namespace, saName string, ref *authenticationv1.BoundObjectReference) (*corev1.Pod, error) {
	if ref == nil {
		return nil, nil
	}
	p := field.NewPath("spec", "boundObjectRef")
	if ref.Kind != "Pod" || (ref.APIVersion != "" && ref.APIVersion != "v1") {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s, %s: only Pod (apiVersion v1) is supported",
			ref.APIVersion, ref.Kind))
	}
	if ref.Name == "" {
		return nil, apierrors.NewInvalid(tokenRequestKind.GroupKind(), saName, field.ErrorList{
			field.Required(p.Child("name"), "the pod to bind the token to")})
	}
	pod, err := r.ti.Getter.Pod(namespace, ref.Name)
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewInvalid(tokenRequestKind.GroupKind(), saName, field.ErrorList{
			field.Invalid(p.Child("name"), ref.Name, fmt.Sprintf("no pod %s in namespace %s", ref.Name, namespace))})
	}
	if err != nil {
		return nil, lookupError(err)
	}
	if ref.UID != "" && ref.UID != pod.UID {
		return nil, apierrors.NewInvalid(tokenRequestKind.GroupKind(), saName, field.ErrorList{
			field.Invalid(p.Child("uid"), ref.UID, fmt.Sprintf("pod %s has UID %s: the pod was deleted and re-created", ref.Name, pod.UID))})
	}
	if pod.Spec.ServiceAccountName != saName {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("cannot bind token for serviceaccount %q to pod %q, which runs as serviceaccount %q",
			saName, ref.Name, pod.Spec.ServiceAccountName))
	}
	return pod, nil
}

// lookupError passes API errors of a lookup on and makes others internal errors.
func lookupError(err error) error {
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	return apierrors.NewInternalError(err)
}

// spelledDuration writes d as Kubernetes' messages do: "10 minutes", "1 hour", "90 seconds".
func spelledDuration(d time.Duration) string {
	n, unit := int64(d/time.Second), "second"
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		n, unit = int64(d/time.Hour), "hour"
	case d >= time.Minute && d%time.Minute == 0:
		n, unit = int64(d/time.Minute), "minute"
	}
	if n != 1 {
		unit += "s"
	}
	return fmt.Sprintf("%d %s", n, unit)
}
