package quota

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	quotav1 "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func list(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func container(name string, requests, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}
}

func pod(name string, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.PodSpec{Containers: containers}}
}

// listerOf gives listers over objs, for the evaluators' UsageStats.
func listerOf(objs ...runtime.Object) quotav1.ListerForResourceFunc {
	return func(gvr schema.GroupVersionResource) (cache.GenericLister, error) {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			switch {
			case gvr.Resource == "pods" && isA[*corev1.Pod](o),
				gvr.Resource == "services" && isA[*corev1.Service](o),
				gvr.Resource == "persistentvolumeclaims" && isA[*corev1.PersistentVolumeClaim](o),
				gvr.Resource == "configmaps" && isA[*corev1.ConfigMap](o):
				if err := idx.Add(o); err != nil {
					return nil, err
				}
			}
		}
		return cache.NewGenericLister(idx, gvr.GroupResource()), nil
	}
}

func isA[T any](o runtime.Object) bool { _, ok := o.(T); return ok }

func usageOf(t *testing.T, e interface {
	Usage(runtime.Object) (corev1.ResourceList, error)
}, o runtime.Object) corev1.ResourceList {
	t.Helper()
	u, err := e.Usage(o)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func expectList(t *testing.T, what string, got, want corev1.ResourceList) {
	t.Helper()
	if !quotav1.Equals(got, want) {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

// A pod uses its containers' requests and limits under every name a quota can give them;
// init containers count by the largest; a finished pod only counts as an object.
func TestPodUsage(t *testing.T) {
	now := time.Now()
	e := &podEvaluator{now: func() time.Time { return now }}
	p := pod("web",
		container("app", list("cpu", "250m", "memory", "64Mi", "example.com/gpu", "1", "hugepages-2Mi", "4Mi"), list("cpu", "500m", "memory", "128Mi", "example.com/gpu", "1", "hugepages-2Mi", "4Mi")),
		container("sidecar", list("cpu", "250m"), nil))
	p.Spec.InitContainers = []corev1.Container{container("init", list("cpu", "2"), nil)}
	expectList(t, "running pod", usageOf(t, e, p), list(
		"count/pods", "1", "pods", "1",
		"cpu", "2", "requests.cpu", "2", "limits.cpu", "500m",
		"memory", "64Mi", "requests.memory", "64Mi", "limits.memory", "128Mi",
		"requests.example.com/gpu", "1", "hugepages-2Mi", "4Mi", "requests.hugepages-2Mi", "4Mi"))

	done := p.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	expectList(t, "succeeded pod", usageOf(t, e, done), list("count/pods", "1"))

	deleting := p.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Minute)}
	deleting.DeletionGracePeriodSeconds = ptr.To[int64](30)
	expectList(t, "pod past its grace period", usageOf(t, e, deleting), list("count/pods", "1"))
	deleting.DeletionGracePeriodSeconds = ptr.To[int64](300)
	if u := usageOf(t, e, deleting); u.Cpu().String() != "2" {
		t.Errorf("pod within its grace period uses cpu %s, want 2", u.Cpu())
	}
}

// A quota on cpu or memory makes every container name them; other resources need not be set.
func TestPodConstraints(t *testing.T) {
	e := &podEvaluator{now: time.Now}
	p := pod("web", container("app", list("cpu", "1"), nil), container("sidecar", nil, nil))
	p.Spec.InitContainers = []corev1.Container{container("init", list("cpu", "1", "memory", "1Mi"), nil)}
	err := e.Constraints([]corev1.ResourceName{"requests.cpu", "limits.memory", "pods", "requests.storage"}, p)
	if err == nil || err.Error() != "must specify limits.memory for: app,init,sidecar; requests.cpu for: sidecar" {
		t.Errorf("Constraints: %v", err)
	}
	if err := e.Constraints([]corev1.ResourceName{"pods", "requests.ephemeral-storage"}, p); err != nil {
		t.Errorf("Constraints without cpu or memory: %v", err)
	}
}

// Scopes select the pods a quota counts: BestEffort, Terminating, PriorityClass (with Exists
// and In), CrossNamespacePodAffinity.
func TestPodScopes(t *testing.T) {
	bestEffort := pod("be", container("app", nil, nil))
	burstable := pod("burst", container("app", list("cpu", "100m"), nil))
	job := pod("job", container("app", list("cpu", "100m"), nil))
	job.Spec.ActiveDeadlineSeconds = ptr.To[int64](60)
	job.Spec.PriorityClassName = "batch"
	cross := pod("cross", container("app", nil, nil))
	cross.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
		Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", Namespaces: []string{"other"}}}}}}
	e := &podEvaluator{list: generic.ListResourceUsingListerFunc(listerOf(bestEffort, burstable, job, cross), podsResource), now: time.Now}
	for _, c := range []struct {
		name     string
		scopes   []corev1.ResourceQuotaScope
		selector *corev1.ScopeSelector
		pods     string
	}{
		{"no scope", nil, nil, "4"},
		{"BestEffort", []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}, nil, "2"},
		{"NotBestEffort", []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotBestEffort}, nil, "2"},
		{"Terminating", []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeTerminating}, nil, "1"},
		{"NotTerminating and BestEffort", []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeBestEffort}, nil, "2"},
		{"PriorityClass exists", nil, &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpExists}}}, "1"},
		{"PriorityClass in (high)", nil, &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"}}}}, "0"},
		{"PriorityClass notin (high)", nil, &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpNotIn, Values: []string{"high"}}}}, "4"},
		{"CrossNamespacePodAffinity", nil, &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{ScopeName: corev1.ResourceQuotaScopeCrossNamespacePodAffinity, Operator: corev1.ScopeSelectorOpExists}}}, "1"},
	} {
		stats, err := e.UsageStats(quotav1.UsageStatsOptions{Namespace: "ns", Scopes: c.scopes, ScopeSelector: c.selector, Resources: []corev1.ResourceName{"pods"}})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := stats.Used[corev1.ResourcePods]; got.String() != c.pods {
			t.Errorf("%s: %s pods, want %s", c.name, got.String(), c.pods)
		}
	}
}

// Services use node ports per port (none for a LoadBalancer that allocates none, unless one
// was given) and one load balancer; claims their storage, also under their class's names.
func TestServiceAndClaimUsage(t *testing.T) {
	s := &serviceEvaluator{}
	ports := []corev1.ServicePort{{Port: 80}, {Port: 443, NodePort: 30443}}
	np := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: ports}}
	expectList(t, "NodePort", usageOf(t, s, np), list("count/services", "1", "services", "1", "services.nodeports", "2"))
	lb := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports, AllocateLoadBalancerNodePorts: ptr.To(false)}}
	expectList(t, "LoadBalancer without node ports", usageOf(t, s, lb), list("count/services", "1", "services", "1", "services.loadbalancers", "1", "services.nodeports", "1"))
	ci := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: ports}}
	expectList(t, "ClusterIP", usageOf(t, s, ci), list("count/services", "1", "services", "1"))

	c := &claimEvaluator{}
	pvc := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("fast"),
		Resources: corev1.VolumeResourceRequirements{Requests: list("storage", "1Gi")}}}
	expectList(t, "claim", usageOf(t, c, pvc), list("count/persistentvolumeclaims", "1", "persistentvolumeclaims", "1", "requests.storage", "1Gi",
		"fast.storageclass.storage.k8s.io/requests.storage", "1Gi", "fast.storageclass.storage.k8s.io/persistentvolumeclaims", "1"))
	pvc.Status.AllocatedResources = list("storage", "2Gi")
	if u := usageOf(t, c, pvc)[corev1.ResourceRequestsStorage]; u.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("claim of 1Gi allocated 2Gi uses %s of requests.storage, want 2Gi", u.String())
	}
	got := c.MatchingResources([]corev1.ResourceName{"requests.storage", "fast.storageclass.storage.k8s.io/requests.storage", "fast.storageclass.storage.k8s.io/other", "pods"})
	if strings.Join(names(got), ",") != "requests.storage,fast.storageclass.storage.k8s.io/requests.storage" {
		t.Errorf("claim MatchingResources %v", got)
	}
}

// The usage a quota sees: the evaluators a controller lists from, summed for one namespace
// and masked to the quota's resources, legacy names and count/ names alike.
func TestCalculateUsage(t *testing.T) {
	objs := []runtime.Object{
		pod("a", container("app", list("cpu", "1"), nil)),
		pod("b", container("app", list("cpu", "500m"), nil)),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "other"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "ns"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc", Namespace: "ns"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}},
	}
	reg := generic.NewRegistry(Evaluators(listerOf(objs...), time.Now))
	hard := list("pods", "10", "requests.cpu", "4", "configmaps", "5", "count/configmaps", "5", "services.nodeports", "3", "requests.storage", "1Gi")
	used, err := quotav1.CalculateUsage("ns", nil, hard, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	expectList(t, "usage", used, list("pods", "2", "requests.cpu", "1500m", "configmaps", "1", "count/configmaps", "1", "services.nodeports", "1", "requests.storage", "0"))
	if _, err := (&podEvaluator{list: listFunc(nil, podsResource), now: time.Now}).UsageStats(quotav1.UsageStatsOptions{Namespace: "ns", Resources: []corev1.ResourceName{"pods"}}); err == nil {
		t.Error("admission's evaluators (no lister) aggregated usage")
	}
}

func TestObjectCountResource(t *testing.T) {
	for in, want := range map[string]string{"count/deployments.apps": "deployments.apps", "count/widgets.example.com": "widgets.example.com", "count/pods": "pods"} {
		gr, ok := ObjectCountResource(corev1.ResourceName(in))
		if !ok || gr.String() != want {
			t.Errorf("%s: %v %v, want %s", in, gr, ok, want)
		}
	}
	for _, in := range []string{"pods", "count/", "requests.cpu"} {
		if _, ok := ObjectCountResource(corev1.ResourceName(in)); ok {
			t.Errorf("%s parsed as an object count", in)
		}
	}
}

func names(rs []corev1.ResourceName) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r)
	}
	return out
}
