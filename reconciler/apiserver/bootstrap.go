package apiserver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
)

// ensureBootstrapObjects creates the objects every site has (the system namespaces, the
// built-in PriorityClasses, ...), retrying until the API answers. Objects that exist are left
// as they are.
func ensureBootstrapObjects(ctx context.Context, client kubernetes.Interface) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range SystemNamespaces {
			_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: systemNamespaceLabels(name)}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return false, nil
			}
		}
		for _, pc := range validation.SystemPriorityClasses() {
			_, err := client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return false, nil
			}
		}
		return true, nil
	})
}

// reconcileBootstrapPolicy writes the bootstrap RBAC policy, the roles and bindings of
// Kubernetes and those of flotilla's components, as kube-apiserver does at start: what is
// missing is created, rules and subjects missing from a stored object are added, and what
// users added is kept (an object annotated rbac.authorization.kubernetes.io/autoupdate:
// "false" is left alone). It returns once the policy is written and the authorizer's
// caches have synced, so the server reports ready only when RBAC can allow requests.
func reconcileBootstrapPolicy(ctx context.Context, client kubernetes.Interface, f informers.SharedInformerFactory) error {
	roles := append(rbac.BootstrapClusterRoles(), rbac.ComponentClusterRoles()...)
	bindings := append(rbac.BootstrapClusterRoleBindings(), rbac.ComponentClusterRoleBindings()...)
	crs, crbs := client.RbacV1().ClusterRoles(), client.RbacV1().ClusterRoleBindings()
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		lastErr = nil
		for i := range roles {
			existing, err := crs.Get(ctx, roles[i].Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				existing = nil
			} else if err != nil {
				lastErr = err
				return false, nil
			}
			r, err := rbac.Reconcile(existing, &roles[i])
			if err != nil {
				return false, fmt.Errorf("ClusterRole %s: %w", roles[i].Name, err)
			}
			switch r.Operation {
			case rbac.OperationCreate:
				_, err = crs.Create(ctx, r.Object, metav1.CreateOptions{})
			case rbac.OperationUpdate:
				_, err = crs.Update(ctx, r.Object, metav1.UpdateOptions{})
			}
			if err != nil {
				lastErr = fmt.Errorf("ClusterRole %s: %w", roles[i].Name, err)
				return false, nil
			}
		}
		for i := range bindings {
			existing, err := crbs.Get(ctx, bindings[i].Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				existing = nil
			} else if err != nil {
				lastErr = err
				return false, nil
			}
			r, err := rbac.Reconcile(existing, &bindings[i])
			if err != nil {
				return false, fmt.Errorf("ClusterRoleBinding %s: %w", bindings[i].Name, err)
			}
			switch r.Operation {
			case rbac.OperationCreate:
				_, err = crbs.Create(ctx, r.Object, metav1.CreateOptions{})
			case rbac.OperationUpdate:
				_, err = crbs.Update(ctx, r.Object, metav1.UpdateOptions{})
			case rbac.OperationRecreate:
				if err = crbs.Delete(ctx, r.Object.Name, metav1.DeleteOptions{}); err == nil || apierrors.IsNotFound(err) {
					obj := r.Object.DeepCopy()
					obj.ResourceVersion = ""
					_, err = crbs.Create(ctx, obj, metav1.CreateOptions{})
				}
			}
			if err != nil {
				lastErr = fmt.Errorf("ClusterRoleBinding %s: %w", bindings[i].Name, err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("bootstrap RBAC policy: %w (last error: %v)", err, lastErr)
	}
	rb := f.Rbac().V1()
	if !cache.WaitForCacheSync(ctx.Done(), rb.Roles().Informer().HasSynced, rb.RoleBindings().Informer().HasSynced,
		rb.ClusterRoles().Informer().HasSynced, rb.ClusterRoleBindings().Informer().HasSynced) {
		return fmt.Errorf("RBAC caches did not sync: %w", ctx.Err())
	}
	return nil
}

// ensurePolicies creates the objects of the built-in admission policy set that do not exist,
// in the order given (params before the policies that read them, policies before their
// bindings), retrying for up to a minute, then logging why and giving up until the next
// start. An object that exists is left as it is: the set is installed once, then it is the
// users' to edit or delete (a deleted one comes back at the next start of an API server).
func ensurePolicies(ctx context.Context, loopback *restclient.Config, objs []*unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(loopback)
	if err != nil {
		return fmt.Errorf("policy set: %w", err)
	}
	mapper := OfflineRESTMapper()
	var lastErr error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, o := range objs {
			gvk := o.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return false, fmt.Errorf("policy set: %s %s: %w", gvk.Kind, o.GetName(), err)
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
			}
			if _, err = ri.Create(ctx, o, metav1.CreateOptions{FieldManager: "flotilla-policies"}); err != nil && !apierrors.IsAlreadyExists(err) {
				lastErr = fmt.Errorf("create %s %s: %w", gvk.Kind, o.GetName(), err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && lastErr != nil {
		// A site that refuses the set (a webhook, a quota...) still serves: the policies are
		// missing, and the log says which and why.
		klog.FromContext(ctx).Error(lastErr, "the built-in policy set (--policies) is not installed: fix the cause, then restart this agent to try again")
		return nil
	}
	return err
}
