package api

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestResourceQuota: a namespace's ResourceQuota, applied with kubectl (no "not enforced"
// warning), gets its status from the resourcequota controller (running as itself, with its
// own role), and the API refuses what would take it over its limits: pods by count and cpu,
// pods that do not name a cpu request, node ports, claims' storage, ConfigMaps and
// Deployments by count (count/deployments.apps). Deleting a pod gives its share back.
func TestResourceQuota(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers=resourcequota"}})
	c := a.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "quota-test"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := a.Kubectl(`apiVersion: v1
kind: ResourceQuota
metadata: {name: compute, namespace: quota-test}
spec:
  hard:
    pods: "2"
    requests.cpu: "1"
    services.nodeports: "1"
    requests.storage: 2Gi
    count/configmaps: "1"
    count/deployments.apps: "1"
`, "apply", "-f", "-")
	if err != nil || strings.Contains(errOut, "Warning") {
		t.Fatalf("ResourceQuota apply: %v, want no warning:\n%s", err, errOut)
	}
	zero := map[string]string{"pods": "0", "requests.cpu": "0", "services.nodeports": "0", "requests.storage": "0",
		"count/configmaps": "0", "count/deployments.apps": "0"}
	waitUsed(ctx, t, c, ns, "compute", zero)
	q, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "compute", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Status.Hard[corev1.ResourceRequestsCPU]; got.String() != "1" || len(q.Status.Hard) != 6 {
		t.Errorf("status.hard %v, want spec.hard", q.Status.Hard)
	}

	pod := func(name, cpu string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "flotilla.local/hello:latest"}}}}
		if cpu != "" {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		return p
	}
	create := func(p *corev1.Pod) error {
		_, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	refused := func(what string, err error, message string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), message) {
			t.Errorf("%s: %v, want 403 with %q", what, err, message)
		}
	}
	if err := create(pod("a", "500m")); err != nil {
		t.Fatal(err)
	}
	// The admission charges the quota at once, before the controller looks.
	q, err = c.CoreV1().ResourceQuotas(ns).Get(ctx, "compute", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if used := q.Status.Used[corev1.ResourcePods]; used.String() != "1" {
		t.Errorf("after one pod, status.used pods %s, want 1", used.String())
	}
	refused("pod without a cpu request", create(pod("no-request", "")), "must specify requests.cpu for: app")
	refused("pod over the cpu quota", create(pod("big", "600m")),
		"exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=500m, limited: requests.cpu=1")
	if err := create(pod("b", "250m")); err != nil {
		t.Fatal(err)
	}
	refused("third pod", create(pod("c", "100m")), "exceeded quota: compute, requested: pods=1, used: pods=2, limited: pods=2")
	// A dry run is judged, but charges nothing.
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod("c", "100m"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("dry-run third pod: %v, want 403", err)
	}

	// Deleting a pod (never scheduled: it goes at once) gives its share back.
	if err := c.CoreV1().Pods(ns).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(ctx, t, c, ns, "compute", map[string]string{"pods": "1", "requests.cpu": "250m"})
	if err := create(pod("c", "750m")); err != nil {
		t.Errorf("pod after a deletion freed its share: %v", err)
	}

	// Node ports: one port left for the namespace.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "https", Port: 443}}}}
	_, err = c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	refused("Service with two node ports", err, "exceeded quota: compute, requested: services.nodeports=2, used: services.nodeports=0, limited: services.nodeports=1")
	svc.Spec.Ports = svc.Spec.Ports[:1]
	if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Errorf("Service with one node port: %v", err)
	}

	// Claims: storage.
	claim := func(name, size string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}
	}
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim("data", "1Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim("more", "1536Mi"), metav1.CreateOptions{})
	refused("claim over the storage quota", err, "exceeded quota: compute, requested: requests.storage=1536Mi, used: requests.storage=1Gi, limited: requests.storage=2Gi")

	// Object counts: a legacy kind and an apps one, whose count the controller learns from
	// discovery.
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm("one"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CoreV1().ConfigMaps(ns).Create(ctx, cm("two"), metav1.CreateOptions{})
	refused("second ConfigMap", err, "exceeded quota: compute, requested: count/configmaps=1, used: count/configmaps=1, limited: count/configmaps=1")
	deployment := func(name string) *appsv1.Deployment {
		labels := map[string]string{"app": name}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod("x", "").Spec}}}
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, deployment("one"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.AppsV1().Deployments(ns).Create(ctx, deployment("two"), metav1.CreateOptions{})
	refused("second Deployment", err, "exceeded quota: compute, requested: count/deployments.apps=1, used: count/deployments.apps=1, limited: count/deployments.apps=1")
	if err := c.AppsV1().Deployments(ns).Delete(ctx, "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller counts Deployments itself (not only the admission's charges): once the
	// first is gone, the count goes back to 0.
	waitUsed(ctx, t, c, ns, "compute", map[string]string{"count/deployments.apps": "0", "count/configmaps": "1",
		"pods": "2", "requests.cpu": "1", "services.nodeports": "1", "requests.storage": "1Gi"})
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, deployment("two"), metav1.CreateOptions{}); err != nil {
		t.Errorf("Deployment after the first was deleted: %v", err)
	}

	// A quota that counts a kind the API does not serve: the rest of it is kept, and a Warning
	// event on it says what to change.
	_, errOut, err = a.Kubectl(`apiVersion: v1
kind: ResourceQuota
metadata: {name: widgets, namespace: quota-test}
spec: {hard: {count/widgets.example.com: "1", pods: "10"}}
`, "apply", "-f", "-")
	if err != nil {
		t.Fatalf("ResourceQuota apply: %v\n%s", err, errOut)
	}
	waitUsed(ctx, t, c, ns, "widgets", map[string]string{"pods": "2"})
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=widgets"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "UnknownResource" &&
				strings.HasPrefix(e.Message, "count/widgets.example.com: the API serves no resource widgets.example.com; status.used leaves it out") {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Errorf("no UnknownResource event on the quota counting widgets.example.com: %v", err)
	}

	// A pod that finished no longer counts for "pods" and its requests.
	b, err := c.CoreV1().Pods(ns).Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Status.Phase = corev1.PodSucceeded
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(ctx, t, c, ns, "compute", map[string]string{"pods": "1", "requests.cpu": "750m"})

	// Another namespace is not limited.
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod("free", ""), metav1.CreateOptions{}); err != nil {
		t.Errorf("pod in a namespace without quota: %v", err)
	}
}

// waitUsed waits until the quota's status.used has the values of want.
func waitUsed(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string, want map[string]string) {
	t.Helper()
	var last corev1.ResourceList
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		q, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = q.Status.Used
		for r, v := range want {
			got, ok := q.Status.Used[corev1.ResourceName(r)]
			if !ok || got.Cmp(resource.MustParse(v)) != 0 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("quota %s status.used %v, want %v: %v", name, last, want, err)
	}
}

// TestResourceQuotaCapsReplicaSet: a ReplicaSet asking for more pods than its namespace's
// quota allows gets as many as fit and a FailedCreate Warning event with the quota's message;
// when the quota is raised, the rest are created.
func TestResourceQuotaCapsReplicaSet(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers=resourcequota,replicaset"}})
	c := a.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "default"
	if _, errOut, err := a.Kubectl(`apiVersion: v1
kind: ResourceQuota
metadata: {name: pods, namespace: default}
spec: {hard: {pods: "2"}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: app, image: flotilla.local/hello:latest}]}
`, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v\n%s", err, errOut)
	}
	var pods int
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web,reason=FailedCreate"})
		if err != nil {
			return false, err
		}
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		pods = len(list.Items)
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2") {
				return pods == 2, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("ReplicaSet under a quota of 2 pods: %d pods, FailedCreate event with the quota's message: %v", pods, err)
	}
	q, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "pods", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Spec.Hard[corev1.ResourcePods] = resource.MustParse("3")
	if _, err := c.CoreV1().ResourceQuotas(ns).Update(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		pods = len(list.Items)
		return pods == 3, nil
	}); err != nil {
		t.Errorf("after the quota was raised to 3: %d pods, want 3: %v", pods, err)
	}
}
