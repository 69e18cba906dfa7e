package apiserver

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/flotilla-dev/flotilla/reconciler/authz"
)

// isPlanner reports whether u holds a plan-only credential.
func isPlanner(u user.Info) bool {
	return u != nil && slices.Contains(u.GetGroups(), authz.PlannersGroup)
}

// plannerGuard refuses every write of a plan-only user that is not a dry-run, before any
// other admission plugin or webhook sees it. Connecting to a pod (exec, attach,
// port-forward, proxy) has no dry-run and is refused too. Access reviews are not writes.
type plannerGuard struct{ *admission.Handler }

func newPlannerGuard() *plannerGuard {
	return &plannerGuard{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete, admission.Connect)}
}

var (
	_ admission.MutationInterface   = (*plannerGuard)(nil)
	_ admission.ValidationInterface = (*plannerGuard)(nil)
)

func (g *plannerGuard) Admit(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	return g.Validate(ctx, a, o)
}

func (*plannerGuard) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if !isPlanner(a.GetUserInfo()) || a.IsDryRun() {
		return nil
	}
	switch a.GetResource().Group {
	case authenticationv1.GroupName, authorizationv1.GroupName:
		return nil
	}
	return admission.NewForbidden(a, fmt.Errorf("user %q holds a plan-only credential (group %s): it may write only as a dry-run (flotilla plan, kubectl --dry-run=server); use a credential that may write",
		a.GetUserInfo().GetName(), authz.PlannersGroup))
}

// redactedSecrets serves Secrets, with their values replaced for plan-only users: each
// value becomes a digest keyed by a site secret, of the namespace, name, key and value.
// A planner sees which keys a Secret has and, comparing the live object with a dry-run
// of git's, which values would change, but never a value, nor whether two Secrets hold
// the same one.
type redactedSecrets struct {
	*store
	key []byte
}

var (
	_ rest.StandardStorage = (*redactedSecrets)(nil)
	_ rest.Watcher         = (*redactedSecrets)(nil)
)

// redactedPrefix starts every value a planner sees.
const redactedPrefix = "flotilla-redacted:"

func (r *redactedSecrets) redact(ctx context.Context, obj runtime.Object) runtime.Object {
	if obj == nil {
		return nil
	}
	if u, ok := genericapirequest.UserFrom(ctx); !ok || !isPlanner(u) {
		return obj
	}
	switch o := obj.(type) {
	case *corev1.Secret:
		c := o.DeepCopy()
		r.redactSecret(c)
		return c
	case *corev1.SecretList:
		c := o.DeepCopy()
		for i := range c.Items {
			r.redactSecret(&c.Items[i])
		}
		return c
	}
	return obj
}

func (r *redactedSecrets) redactSecret(s *corev1.Secret) {
	for k, v := range s.Data {
		mac := hmac.New(sha256.New, r.key)
		fmt.Fprintf(mac, "%s\x00%s\x00%s\x00", s.Namespace, s.Name, k)
		mac.Write(v)
		s.Data[k] = []byte(redactedPrefix + hex.EncodeToString(mac.Sum(nil)[:16]))
	}
	s.StringData = nil
	// kubectl apply keeps the applied object, values included, in an annotation.
	if _, ok := s.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		s.Annotations[corev1.LastAppliedConfigAnnotation] = redactedPrefix
	}
}

func (r *redactedSecrets) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.store.Get(ctx, name, opts)
	return r.redact(ctx, obj), err
}

func (r *redactedSecrets) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	obj, err := r.store.List(ctx, opts)
	return r.redact(ctx, obj), err
}

func (r *redactedSecrets) Create(ctx context.Context, obj runtime.Object, v rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
	out, err := r.store.Create(ctx, obj, v, opts)
	return r.redact(ctx, out), err
}

func (r *redactedSecrets) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, cv rest.ValidateObjectFunc,
	uv rest.ValidateObjectUpdateFunc, force bool, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	out, created, err := r.store.Update(ctx, name, objInfo, cv, uv, force, opts)
	return r.redact(ctx, out), created, err
}

func (r *redactedSecrets) Delete(ctx context.Context, name string, v rest.ValidateObjectFunc, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	out, done, err := r.store.Delete(ctx, name, v, opts)
	return r.redact(ctx, out), done, err
}

func (r *redactedSecrets) DeleteCollection(ctx context.Context, v rest.ValidateObjectFunc, opts *metav1.DeleteOptions, lo *metainternalversion.ListOptions) (runtime.Object, error) {
	out, err := r.store.DeleteCollection(ctx, v, opts, lo)
	return r.redact(ctx, out), err
}

func (r *redactedSecrets) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	w, err := r.store.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	if u, ok := genericapirequest.UserFrom(ctx); !ok || !isPlanner(u) {
		return w, nil
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		e.Object = r.redact(ctx, e.Object)
		return e, true
	}), nil
}
