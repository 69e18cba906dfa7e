// Package quota measures what objects use of a namespace's ResourceQuotas: how much each pod,
// Service and claim counts for the quota's resources, which scopes a pod matches, and how
// many objects of a kind a namespace holds. The API server's ResourceQuota admission (k8s.io/
// apiserver's plugin) charges a new object against the quotas with these evaluators, and the
// resourcequota controller recomputes each quota's status.used with them.
package quota

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/admission"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	resourcehelper "k8s.io/component-helpers/resource"
)

var (
	podsResource     = corev1.SchemeGroupVersion.WithResource("pods")
	servicesResource = corev1.SchemeGroupVersion.WithResource("services")
	claimsResource   = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
)

// LegacyCounted are the kinds whose object count a quota names without the count/ prefix
// (configmaps, secrets, ...), besides count/<resource>; pods, services and claims have
// evaluators of their own.
var LegacyCounted = map[schema.GroupResource]corev1.ResourceName{
	corev1.Resource("configmaps"):             corev1.ResourceConfigMaps,
	corev1.Resource("secrets"):                corev1.ResourceSecrets,
	corev1.Resource("replicationcontrollers"): corev1.ResourceReplicationControllers,
	corev1.Resource("resourcequotas"):         corev1.ResourceQuotas,
}

// IgnoredResources are never charged, whatever a quota says: they are not stored (reviews)
// or not worth counting (events), as upstream.
var IgnoredResources = map[schema.GroupResource]struct{}{
	{Group: "", Resource: "events"}:                                        {},
	{Group: "events.k8s.io", Resource: "events"}:                           {},
	{Group: "authentication.k8s.io", Resource: "tokenreviews"}:             {},
	{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}:       {},
	{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}:      {},
	{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}:  {},
	{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"}: {},
	{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"}:   {},
}

// Evaluators are the evaluators of pods, Services, claims and the legacy-named object counts.
// listerFor gives the listers UsageStats reads; nil for admission, which only measures the
// object of a request.
func Evaluators(listerFor quota.ListerForResourceFunc, now func() time.Time) []quota.Evaluator {
	out := []quota.Evaluator{
		&podEvaluator{list: listFunc(listerFor, podsResource), now: now},
		&serviceEvaluator{list: listFunc(listerFor, servicesResource)},
		&claimEvaluator{list: listFunc(listerFor, claimsResource)},
	}
	grs := make([]schema.GroupResource, 0, len(LegacyCounted))
	for gr := range LegacyCounted {
		grs = append(grs, gr)
	}
	sort.Slice(grs, func(i, j int) bool { return grs[i].Resource < grs[j].Resource })
	for _, gr := range grs {
		out = append(out, generic.NewObjectCountEvaluator(gr, listFunc(listerFor, gr.WithVersion("v1")), LegacyCounted[gr]))
	}
	return out
}

// Configuration is the quota configuration of the ResourceQuota admission plugin.
func Configuration() quota.Configuration {
	return generic.NewConfiguration(Evaluators(nil, time.Now), IgnoredResources)
}

func listFunc(listerFor quota.ListerForResourceFunc, gvr schema.GroupVersionResource) generic.ListFuncByNamespace {
	if listerFor == nil {
		return func(string) ([]runtime.Object, error) {
			return nil, fmt.Errorf("%s: no lister (admission does not aggregate usage)", gvr.Resource)
		}
	}
	return generic.ListResourceUsingListerFunc(listerFor, gvr)
}

// podResources are the pod-level resources a quota can name (plus the prefixed ones below).
var podResources = []corev1.ResourceName{
	generic.ObjectCountQuotaResourceNameFor(podsResource.GroupResource()),
	corev1.ResourcePods,
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceRequestsEphemeralStorage,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage,
}

// mustSpecify are the resources that, when a quota names them, every container of a new pod
// must request (or limit) explicitly: upstream's long-standing rule for cpu and memory only.
var mustSpecify = map[corev1.ResourceName]bool{
	corev1.ResourceCPU: true, corev1.ResourceMemory: true,
	corev1.ResourceRequestsCPU: true, corev1.ResourceRequestsMemory: true,
	corev1.ResourceLimitsCPU: true, corev1.ResourceLimitsMemory: true,
}

type podEvaluator struct {
	list generic.ListFuncByNamespace
	now  func() time.Time
}

var _ quota.Evaluator = &podEvaluator{}

func asPod(obj runtime.Object) (*corev1.Pod, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("expected a v1 Pod, got %T", obj)
	}
	return pod, nil
}

// Constraints refuses a pod with a container that does not set a cpu or memory resource the
// quota names: "must specify limits.cpu for: app; requests.memory for: app,sidecar".
func (p *podEvaluator) Constraints(required []corev1.ResourceName, item runtime.Object) error {
	pod, err := asPod(item)
	if err != nil {
		return err
	}
	missing := map[corev1.ResourceName][]string{}
	check := func(c *corev1.Container) {
		has := containerUsage(c.Resources.Requests, c.Resources.Limits)
		for _, r := range required {
			if _, ok := has[r]; mustSpecify[r] && !ok {
				missing[r] = append(missing[r], c.Name)
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		check(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		check(&pod.Spec.Containers[i])
	}
	if len(missing) == 0 {
		return nil
	}
	names := make([]string, 0, len(missing))
	for r := range missing {
		names = append(names, string(r))
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, r := range names {
		containers := missing[corev1.ResourceName(r)]
		sort.Strings(containers)
		parts = append(parts, r+" for: "+strings.Join(containers, ","))
	}
	return fmt.Errorf("must specify %s", strings.Join(parts, "; "))
}

func (p *podEvaluator) GroupResource() schema.GroupResource { return podsResource.GroupResource() }

// Handles: pods are charged when created (a resize of a running pod is not carried out by
// flotilla's node agent, so it changes no usage).
func (p *podEvaluator) Handles(a admission.Attributes) bool {
	return a.GetSubresource() == "" && a.GetOperation() == admission.Create
}

func (p *podEvaluator) Matches(q *corev1.ResourceQuota, item runtime.Object) (bool, error) {
	return generic.Matches(q, item, p.MatchingResources, podMatchesScope)
}

func (p *podEvaluator) MatchingResources(input []corev1.ResourceName) []corev1.ResourceName {
	out := quota.Intersection(input, podResources)
	for _, r := range input {
		if strings.HasPrefix(string(r), corev1.ResourceHugePagesPrefix) ||
			strings.HasPrefix(string(r), corev1.ResourceRequestsHugePagesPrefix) ||
			isExtendedRequest(r) {
			out = append(out, r)
		}
	}
	return out
}

func (p *podEvaluator) MatchingScopes(item runtime.Object, selectors []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	matched := []corev1.ScopedResourceSelectorRequirement{}
	for _, s := range selectors {
		ok, err := podMatchesScope(s, item)
		if err != nil {
			return nil, fmt.Errorf("scope %s: %w", s.ScopeName, err)
		}
		if ok {
			matched = append(matched, s)
		}
	}
	return matched, nil
}

func (p *podEvaluator) UncoveredQuotaScopes(limited, matched []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	uncovered := []corev1.ScopedResourceSelectorRequirement{}
	for _, l := range limited {
		covered := false
		for _, m := range matched {
			covered = covered || m.ScopeName == l.ScopeName
		}
		if !covered {
			uncovered = append(uncovered, l)
		}
	}
	return uncovered, nil
}

// Usage of a pod: count/pods always (every stored pod); the compute resources and "pods" only
// while the pod can still run (not Succeeded or Failed, not past its deletion grace period).
func (p *podEvaluator) Usage(item runtime.Object) (corev1.ResourceList, error) {
	pod, err := asPod(item)
	if err != nil {
		return nil, err
	}
	out := corev1.ResourceList{generic.ObjectCountQuotaResourceNameFor(podsResource.GroupResource()): *resource.NewQuantity(1, resource.DecimalSI)}
	if !countsCompute(pod, p.now()) {
		return out, nil
	}
	opts := resourcehelper.PodResourcesOptions{}
	return quota.Add(out, containerUsage(resourcehelper.PodRequests(pod, opts), resourcehelper.PodLimits(pod, opts))), nil
}

func (p *podEvaluator) UsageStats(o quota.UsageStatsOptions) (quota.UsageStats, error) {
	return generic.CalculateUsageStats(o, p.list, podMatchesScope, p.Usage)
}

// countsCompute reports whether pod still counts for compute resources at now.
func countsCompute(pod *corev1.Pod, now time.Time) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil {
		end := pod.DeletionTimestamp.Add(time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second)
		return now.Before(end)
	}
	return true
}

// containerUsage turns requests and limits into the quota's names: cpu and requests.cpu for
// a cpu request, limits.cpu for a limit, and so on; hugepages and extended resources as
// requests.<name>. "pods" is 1.
func containerUsage(requests, limits corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(1, resource.DecimalSI)}
	for _, r := range []struct{ plain, req, lim corev1.ResourceName }{
		{corev1.ResourceCPU, corev1.ResourceRequestsCPU, corev1.ResourceLimitsCPU},
		{corev1.ResourceMemory, corev1.ResourceRequestsMemory, corev1.ResourceLimitsMemory},
		{corev1.ResourceEphemeralStorage, corev1.ResourceRequestsEphemeralStorage, corev1.ResourceLimitsEphemeralStorage},
	} {
		if q, ok := requests[r.plain]; ok {
			out[r.plain], out[r.req] = q, q
		}
		if q, ok := limits[r.plain]; ok {
			out[r.lim] = q
		}
	}
	for name, q := range requests {
		switch {
		case strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix):
			out[name] = q
			out[corev1.ResourceName(corev1.DefaultResourceRequestsPrefix+string(name))] = q
		case isExtended(name):
			out[corev1.ResourceName(corev1.DefaultResourceRequestsPrefix+string(name))] = q
		}
	}
	return out
}

// isExtended: a resource outside kubernetes.io (a device plugin's, "example.com/gpu").
func isExtended(name corev1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	domain := s[:strings.Index(s, "/")]
	return domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}

// isExtendedRequest: requests.<extended resource>, the only way a quota limits one.
func isExtendedRequest(name corev1.ResourceName) bool {
	s, ok := strings.CutPrefix(string(name), corev1.DefaultResourceRequestsPrefix)
	return ok && isExtended(corev1.ResourceName(s))
}

// podMatchesScope evaluates one of a quota's scopes against a pod.
func podMatchesScope(s corev1.ScopedResourceSelectorRequirement, obj runtime.Object) (bool, error) {
	pod, err := asPod(obj)
	if err != nil {
		return false, err
	}
	switch s.ScopeName {
	case corev1.ResourceQuotaScopeTerminating:
		return terminating(pod), nil
	case corev1.ResourceQuotaScopeNotTerminating:
		return !terminating(pod), nil
	case corev1.ResourceQuotaScopeBestEffort:
		return PodQOSClass(pod) == corev1.PodQOSBestEffort, nil
	case corev1.ResourceQuotaScopeNotBestEffort:
		return PodQOSClass(pod) != corev1.PodQOSBestEffort, nil
	case corev1.ResourceQuotaScopePriorityClass:
		if s.Operator == corev1.ScopeSelectorOpExists {
			return pod.Spec.PriorityClassName != "", nil
		}
		sel, err := scopeSelector(s)
		if err != nil {
			return false, err
		}
		var set labels.Set
		if pod.Spec.PriorityClassName != "" {
			set = labels.Set{string(corev1.ResourceQuotaScopePriorityClass): pod.Spec.PriorityClassName}
		}
		return sel.Matches(set), nil
	case corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return crossNamespaceAffinity(pod), nil
	}
	return false, nil
}

// terminating: a pod with activeDeadlineSeconds (the Terminating scope).
func terminating(pod *corev1.Pod) bool {
	return pod.Spec.ActiveDeadlineSeconds != nil && *pod.Spec.ActiveDeadlineSeconds >= 0
}

// scopeSelector turns a PriorityClass scope requirement into a label selector over the key
// "PriorityClass".
func scopeSelector(s corev1.ScopedResourceSelectorRequirement) (labels.Selector, error) {
	op := map[corev1.ScopeSelectorOperator]selection.Operator{
		corev1.ScopeSelectorOpIn: selection.In, corev1.ScopeSelectorOpNotIn: selection.NotIn,
		corev1.ScopeSelectorOpExists: selection.Exists, corev1.ScopeSelectorOpDoesNotExist: selection.DoesNotExist,
	}[s.Operator]
	if op == "" {
		return nil, fmt.Errorf("scope selector operator %q is not one of In, NotIn, Exists, DoesNotExist", s.Operator)
	}
	req, err := labels.NewRequirement(string(s.ScopeName), op, s.Values)
	if err != nil {
		return nil, err
	}
	return labels.NewSelector().Add(*req), nil
}

// crossNamespaceAffinity: a pod (anti-)affinity term that names namespaces or selects them.
func crossNamespaceAffinity(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	if a == nil {
		return false
	}
	cross := func(terms []corev1.PodAffinityTerm, weighted []corev1.WeightedPodAffinityTerm) bool {
		for _, t := range terms {
			if len(t.Namespaces) > 0 || t.NamespaceSelector != nil {
				return true
			}
		}
		for _, w := range weighted {
			if len(w.PodAffinityTerm.Namespaces) > 0 || w.PodAffinityTerm.NamespaceSelector != nil {
				return true
			}
		}
		return false
	}
	if pa := a.PodAffinity; pa != nil && cross(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution) {
		return true
	}
	if pa := a.PodAntiAffinity; pa != nil && cross(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution) {
		return true
	}
	return false
}

// PodQOSClass is the pod's quality of service class from its containers' requests and limits
// (status.qosClass).
func PodQOSClass(pod *corev1.Pod) corev1.PodQOSClass {
	containers := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	anySet, guaranteed := false, true
	for _, c := range containers {
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[res]
			lim, hasLim := c.Resources.Limits[res]
			if hasReq || hasLim {
				anySet = true
			}
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !anySet:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	default:
		return corev1.PodQOSBurstable
	}
}

// serviceResources are what a quota can limit of Services.
var serviceResources = []corev1.ResourceName{
	generic.ObjectCountQuotaResourceNameFor(servicesResource.GroupResource()),
	corev1.ResourceServices, corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers,
}

// unscoped is what the evaluators of Services and claims share: no scope applies to them, no
// field must be set, and updates are charged too (a Service's change of type adds or frees node
// ports and load balancers; a claim's expansion asks for more storage).
type unscoped struct{}

func (unscoped) Constraints([]corev1.ResourceName, runtime.Object) error { return nil }

func (unscoped) Handles(a admission.Attributes) bool {
	return a.GetSubresource() == "" && (a.GetOperation() == admission.Create || a.GetOperation() == admission.Update)
}

func (unscoped) MatchingScopes(runtime.Object, []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	return []corev1.ScopedResourceSelectorRequirement{}, nil
}

func (unscoped) UncoveredQuotaScopes(_, _ []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	return []corev1.ScopedResourceSelectorRequirement{}, nil
}

type serviceEvaluator struct {
	unscoped
	list generic.ListFuncByNamespace
}

var _ quota.Evaluator = &serviceEvaluator{}

func (s *serviceEvaluator) GroupResource() schema.GroupResource {
	return servicesResource.GroupResource()
}

func (s *serviceEvaluator) Matches(q *corev1.ResourceQuota, item runtime.Object) (bool, error) {
	return generic.Matches(q, item, s.MatchingResources, generic.MatchesNoScopeFunc)
}

func (s *serviceEvaluator) MatchingResources(input []corev1.ResourceName) []corev1.ResourceName {
	return quota.Intersection(input, serviceResources)
}

// Usage of a Service: one service; a LoadBalancer one load balancer; a node port per port of
// a NodePort Service, and of a LoadBalancer Service unless it allocates none.
func (s *serviceEvaluator) Usage(item runtime.Object) (corev1.ResourceList, error) {
	svc, ok := item.(*corev1.Service)
	if !ok {
		return nil, fmt.Errorf("expected a v1 Service, got %T", item)
	}
	one := *resource.NewQuantity(1, resource.DecimalSI)
	out := corev1.ResourceList{
		generic.ObjectCountQuotaResourceNameFor(servicesResource.GroupResource()): one,
		corev1.ResourceServices: one,
	}
	ports := 0
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		ports = len(svc.Spec.Ports)
	case corev1.ServiceTypeLoadBalancer:
		out[corev1.ResourceServicesLoadBalancers] = one
		if a := svc.Spec.AllocateLoadBalancerNodePorts; a != nil && !*a {
			for _, p := range svc.Spec.Ports {
				if p.NodePort != 0 {
					ports++
				}
			}
		} else {
			ports = len(svc.Spec.Ports)
		}
	}
	if ports > 0 {
		out[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(int64(ports), resource.DecimalSI)
	}
	return out, nil
}

func (s *serviceEvaluator) UsageStats(o quota.UsageStatsOptions) (quota.UsageStats, error) {
	return generic.CalculateUsageStats(o, s.list, generic.MatchesNoScopeFunc, s.Usage)
}

// Storage class quota names: <class>.storageclass.storage.k8s.io/requests.storage and
// <class>.storageclass.storage.k8s.io/persistentvolumeclaims.
const storageClassSuffix = ".storageclass.storage.k8s.io/"

type claimEvaluator struct {
	unscoped
	list generic.ListFuncByNamespace
}

var _ quota.Evaluator = &claimEvaluator{}

func (c *claimEvaluator) GroupResource() schema.GroupResource {
	return claimsResource.GroupResource()
}

func (c *claimEvaluator) Matches(q *corev1.ResourceQuota, item runtime.Object) (bool, error) {
	return generic.Matches(q, item, c.MatchingResources, generic.MatchesNoScopeFunc)
}

func (c *claimEvaluator) MatchingResources(input []corev1.ResourceName) []corev1.ResourceName {
	var out []corev1.ResourceName
	for _, r := range input {
		switch {
		case r == corev1.ResourcePersistentVolumeClaims || r == corev1.ResourceRequestsStorage ||
			r == generic.ObjectCountQuotaResourceNameFor(claimsResource.GroupResource()):
			out = append(out, r)
		case strings.Contains(string(r), storageClassSuffix):
			if _, what, _ := strings.Cut(string(r), storageClassSuffix); what == string(corev1.ResourceRequestsStorage) || what == string(corev1.ResourcePersistentVolumeClaims) {
				out = append(out, r)
			}
		}
	}
	return out
}

// Usage of a claim: one claim, its storage request (or what was allocated, if more), and the
// same under its storage class's names.
func (c *claimEvaluator) Usage(item runtime.Object) (corev1.ResourceList, error) {
	pvc, ok := item.(*corev1.PersistentVolumeClaim)
	if !ok {
		return nil, fmt.Errorf("expected a v1 PersistentVolumeClaim, got %T", item)
	}
	one := *resource.NewQuantity(1, resource.DecimalSI)
	out := corev1.ResourceList{
		generic.ObjectCountQuotaResourceNameFor(claimsResource.GroupResource()): one,
		corev1.ResourcePersistentVolumeClaims:                                   one,
	}
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	} else if a, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		class = a
	}
	if class != "" {
		out[corev1.ResourceName(class+storageClassSuffix+string(corev1.ResourcePersistentVolumeClaims))] = one
	}
	storage, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if allocated, has := pvc.Status.AllocatedResources[corev1.ResourceStorage]; has && (!ok || allocated.Cmp(storage) > 0) {
		storage, ok = allocated, true
	}
	if ok {
		out[corev1.ResourceRequestsStorage] = storage
		if class != "" {
			out[corev1.ResourceName(class+storageClassSuffix+string(corev1.ResourceRequestsStorage))] = storage
		}
	}
	return out, nil
}

func (c *claimEvaluator) UsageStats(o quota.UsageStatsOptions) (quota.UsageStats, error) {
	return generic.CalculateUsageStats(o, c.list, generic.MatchesNoScopeFunc, c.Usage)
}

// ObjectCountResource parses a count/<resource>[.<group>] quota name.
func ObjectCountResource(name corev1.ResourceName) (schema.GroupResource, bool) {
	s, ok := strings.CutPrefix(string(name), "count/")
	if !ok || s == "" {
		return schema.GroupResource{}, false
	}
	r, g, _ := strings.Cut(s, ".")
	return schema.GroupResource{Group: g, Resource: r}, true
}
