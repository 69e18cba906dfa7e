package apiserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// policyTypeChecker fills status.typeChecking of every ValidatingAdmissionPolicy, as
// kube-controller-manager's validatingadmissionpolicy-status controller does: each expression
// is type-checked against the schemas of the kinds the policy matches (built-in kinds from
// the API's OpenAPI definitions, CustomResourceDefinitions' from discovery), and its
// warnings are written with the generation they describe. Every API server of a site runs
// one; they compute the same status, and a write that loses a conflict is dropped.
type policyTypeChecker struct {
	client  kubernetes.Interface
	lister  cache.GenericLister
	checker *validating.TypeChecker
	queue   workqueue.TypedRateLimitingInterface[string]
}

func newPolicyTypeChecker(client kubernetes.Interface, f informers.SharedInformerFactory, deps policyDeps, disc discovery.DiscoveryInterface, schemes ...*runtime.Scheme) *policyTypeChecker {
	schemas := &lazySchemaResolver{build: func() resolver.SchemaResolver {
		return resolver.NewDefinitionsSchemaResolver(definitions, schemes...).Combine(&resolver.ClientDiscoveryResolver{Discovery: disc})
	}}
	inf := f.Admissionregistration().V1().ValidatingAdmissionPolicies()
	c := &policyTypeChecker{
		client:  client,
		lister:  cache.NewGenericLister(inf.Informer().GetIndexer(), admissionregistrationv1.Resource("validatingadmissionpolicies")),
		checker: &validating.TypeChecker{SchemaResolver: schemas, RestMapper: deps.mapper},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "policy-type-checking"}),
	}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	return c
}

// lazySchemaResolver builds its resolver on the first look-up: the built-in kinds' schemas
// take megabytes of heap, which a site without a ValidatingAdmissionPolicy never needs.
type lazySchemaResolver struct {
	once  sync.Once
	build func() resolver.SchemaResolver
	r     resolver.SchemaResolver
}

func (l *lazySchemaResolver) ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error) {
	l.once.Do(func() { l.r = l.build() })
	return l.r.ResolveSchema(gvk)
}

// run works the queue until ctx ends.
func (c *policyTypeChecker) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		for c.next(ctx) {
		}
	}, time.Second)
}

func (c *policyTypeChecker) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		klog.FromContext(ctx).V(2).Info("type-checking a ValidatingAdmissionPolicy", "policy", key, "err", err)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *policyTypeChecker) sync(ctx context.Context, name string) error {
	obj, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	policy, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if !ok {
		return fmt.Errorf("unexpected %T", obj)
	}
	want := typeCheckingStatus(c.checker, policy)
	if apiequality.Semantic.DeepEqual(policy.Status.TypeChecking, want.TypeChecking) && policy.Status.ObservedGeneration == want.ObservedGeneration {
		return nil
	}
	p := policy.DeepCopy()
	p.Status.ObservedGeneration, p.Status.TypeChecking = want.ObservedGeneration, want.TypeChecking
	_, err = c.client.AdmissionregistrationV1().ValidatingAdmissionPolicies().UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // a newer version comes through the informer
	}
	return err
}

// typeCheckingStatus is the status a policy's expressions give.
func typeCheckingStatus(checker *validating.TypeChecker, policy *admissionregistrationv1.ValidatingAdmissionPolicy) admissionregistrationv1.ValidatingAdmissionPolicyStatus {
	warnings := checker.Check(policy)
	if warnings == nil {
		warnings = []admissionregistrationv1.ExpressionWarning{}
	}
	return admissionregistrationv1.ValidatingAdmissionPolicyStatus{
		ObservedGeneration: policy.Generation,
		TypeChecking:       &admissionregistrationv1.TypeChecking{ExpressionWarnings: warnings},
	}
}
