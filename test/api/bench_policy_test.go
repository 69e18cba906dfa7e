package api

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/policies"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// benchPolicyDeployment is a Deployment every policy of the restricted set admits (the set
// evaluates all its Deployment rules on it), privileged or not.
func benchPolicyDeployment(name string, privileged bool) *appsv1.Deployment {
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": name}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "c", Image: "flotilla.local/app:v1",
					Resources:       corev1.ResourceRequirements{Requests: rl, Limits: rl},
					SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(privileged)},
				}}},
			},
		},
	}
}

// benchEnvInt is the number in environment variable name, def when it is unset.
func benchEnvInt(b *testing.B, name string, def, least int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		b.Fatalf("%s=%q: want a number of at least %d", name, v, least)
	}
	return n
}

// BenchmarkPolicyWriteLatency creates Deployments through a real agent without admission
// policies and with the restricted library set installed (every Deployment is evaluated by
// all its Deployment policies), in alternating rounds, and prints p50 and p99 of each side
// and the difference (goal: p99 within +2 ms). FLOTILLA_BENCH_WRITES writes per round
// (default 500), FLOTILLA_BENCH_PAIRS rounds per side (default 3). It does its own rounds
// whatever b.N: run it with -benchtime 1x.
func BenchmarkPolicyWriteLatency(b *testing.B) {
	writes := benchEnvInt(b, "FLOTILLA_BENCH_WRITES", 500, 100)
	// The policy-inventory controller runs, as on every site: without its ConfigMap, the
	// policies that read it (critical-pdb matches every Deployment) would have the plugin
	// look their param up with a GET to the API on every write.
	a := framework.StartAgent(b, framework.AgentOptions{Extra: []string{"--controllers=policyinventory"}})
	c := a.Client()
	ctx := context.Background()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().ConfigMaps(policies.InventoryNamespace).Get(ctx, policies.InventoryName, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		b.Fatalf("the policy inventory was not created: %v", err)
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	set, err := policies.Library(policies.SetRestricted)
	if err != nil {
		b.Fatal(err)
	}
	nPolicies := 0
	for _, o := range set {
		if o.GetKind() == "ValidatingAdmissionPolicy" {
			nPolicies++
		}
	}
	dyn := dynamic.NewForConfigOrDie(a.RESTConfig())
	mapper := apiserver.OfflineRESTMapper()
	install := func(on bool) {
		for _, o := range set {
			gvk := o.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				b.Fatal(err)
			}
			ri := dyn.Resource(m.Resource).Namespace(o.GetNamespace())
			if on {
				_, err = ri.Create(ctx, o, metav1.CreateOptions{})
			} else {
				err = ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		// The policy plugin recompiles within a second of a change: wait until a privileged
		// Deployment is refused (installed) or admitted (removed) as a dry-run.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := c.AppsV1().Deployments("bench").Create(ctx, benchPolicyDeployment("probe", true), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			denied := err != nil && strings.Contains(err.Error(), "flotilla-no-privileged")
			return denied == on, nil
		})
		if err != nil {
			b.Fatalf("policies installed=%v not in effect: %v", on, err)
		}
	}
	// settle waits until every installed policy's status.typeChecking is written for its
	// generation (each write makes the plugin recompile the policies), then 2 s more.
	settle := func() {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, p := range list.Items {
				if p.Status.ObservedGeneration != p.Generation {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			b.Fatalf("policies' type-checking status: %v", err)
		}
		time.Sleep(2 * time.Second)
	}
	// p returns the q-quantile of sorted latencies.
	p := func(sorted []time.Duration, q float64) time.Duration { return sorted[int(float64(len(sorted))*q)] }
	round := 0
	run := func(label string) []time.Duration {
		round++
		took := make([]time.Duration, 0, writes)
		for i := range writes {
			d := benchPolicyDeployment(fmt.Sprintf("w%d-%d", round, i), false)
			start := time.Now()
			if _, err := c.AppsV1().Deployments("bench").Create(ctx, d, metav1.CreateOptions{}); err != nil {
				b.Fatalf("%s: create %s: %v", label, d.Name, err)
			}
			took = append(took, time.Since(start))
		}
		sorted := append([]time.Duration(nil), took...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		b.Logf("Deployment create, %s (%d writes): p50 %s, p99 %s", label, writes,
			p(sorted, 0.5).Round(10*time.Microsecond), p(sorted, 0.99).Round(10*time.Microsecond))
		return took
	}
	// Rounds go in ABBA order (none, set, set, none, none, set, ...) so that a drift of the
	// machine over the run (page cache, etcd's growing database, other load) weighs on both
	// sides alike. After each change the server settles (the policies' type-checking status
	// is written, which recompiles them) and a round that is not counted warms the new path.
	// The figures are the quantiles of all counted writes of each side: with 300 writes a
	// round's p99 would be its third-slowest write, too few to compare.
	pairs := benchEnvInt(b, "FLOTILLA_BENCH_PAIRS", 3, 1)
	setLabel := fmt.Sprintf("restricted set (%d policies)", nPolicies)
	var none, restricted []time.Duration
	installed := false
	switchTo := func(on bool) {
		if on != installed {
			install(on)
			settle()
			installed = on
			run("warm-up")
		}
	}
	run("warm-up")
	for i := range 2 * pairs {
		on := i%4 == 1 || i%4 == 2
		switchTo(on)
		if on {
			restricted = append(restricted, run(setLabel)...)
		} else {
			none = append(none, run("no policies")...)
		}
	}
	if installed {
		install(false)
	}
	sort.Slice(none, func(i, j int) bool { return none[i] < none[j] })
	sort.Slice(restricted, func(i, j int) bool { return restricted[i] < restricted[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, side := range []struct {
		label string
		took  []time.Duration
	}{{"no policies", none}, {setLabel, restricted}} {
		b.Logf("all rounds, %s (%d writes): p50 %.2f ms, p90 %.2f ms, p99 %.2f ms", side.label, len(side.took),
			ms(p(side.took, 0.5)), ms(p(side.took, 0.9)), ms(p(side.took, 0.99)))
	}
	delta := ms(p(restricted, 0.99)) - ms(p(none, 0.99))
	b.Logf("p99 with the restricted set minus without: %+.2f ms (goal: at most +2 ms); p50 %+.2f ms",
		delta, ms(p(restricted, 0.5))-ms(p(none, 0.5)))
	b.ReportMetric(delta, "ms-p99-delta")
}
