package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// BenchmarkMutatingAPI measures the latency of writes (ConfigMap creates, one at a time) on
// a 3-host site, against every host's API in turn: as the admin (system:masters, allowed
// before RBAC is consulted) and as a user whose RoleBinding RBAC must find (the cost of
// authorization and of the escalation and plan-only admission checks). It prints p50 and p99
// of each (FLOTILLA_BENCH_WRITES, default 600). FLOTILLA_BENCH_ADMIN_ONLY=1 measures the
// admin only, so that a binary from before RBAC (FLOTILLA_BIN) can be measured the same way.
// It does its own rounds whatever b.N: run it with -benchtime 1x (make bench-api).
func BenchmarkMutatingAPI(b *testing.B) {
	writes := envInt("FLOTILLA_BENCH_WRITES", 600)
	adminOnly := envInt("FLOTILLA_BENCH_ADMIN_ONLY", 0) == 1
	s := newSite(b, 3)
	startSite(b, s)
	h := s.Hosts[0]
	waitFor(b, 2*time.Minute, "3 Ready nodes", func() (bool, string) {
		n, state := readyNodes(h)
		return n == 3, state
	})
	kubectlOut(b, h, "create", "namespace", "bench")
	clients := func(kubeconfig func(i int) string) []kubernetes.Interface {
		var out []kubernetes.Interface
		for i, host := range s.Hosts {
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig(i))
			if err != nil {
				b.Fatal(err)
			}
			cfg.Host = "https://" + host.IP + ":6443"
			cfg.QPS, cfg.Burst = 1000, 1000
			out = append(out, kubernetes.NewForConfigOrDie(cfg))
		}
		return out
	}
	admin := clients(func(i int) string { return s.Hosts[i].Kubeconfig() })
	ctx := context.Background()
	round := 0
	run := func(who string, cs []kubernetes.Interface) {
		round++
		took := make([]time.Duration, 0, writes)
		for i := 0; i < writes; i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d-%d", who, round, i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
			start := time.Now()
			if _, err := cs[i%len(cs)].CoreV1().ConfigMaps("bench").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				b.Fatalf("%s create %s: %v", who, cm.Name, err)
			}
			took = append(took, time.Since(start))
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		p50, p99 := took[len(took)/2], took[len(took)*99/100]
		b.Logf("ConfigMap create on 3 hosts as %s (%d writes): p50 %s, p99 %s", who, writes, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond))
		b.ReportMetric(float64(p50.Microseconds())/1000, "ms-create-p50-"+who)
		b.ReportMetric(float64(p99.Microseconds())/1000, "ms-create-p99-"+who)
	}
	if adminOnly {
		run("admin", admin)
		run("admin", admin)
		return
	}
	kubectlOut(b, h, "create", "rolebinding", "writer", "-n", "bench", "--clusterrole", "edit", "--user", "writer")
	writerConfig := userKubeconfig(b, h, "writer")
	writer := clients(func(int) string { return writerConfig })
	waitFor(b, 30*time.Second, "the writer may create ConfigMaps", func() (bool, string) {
		_, err := writer[0].CoreV1().ConfigMaps("bench").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
		return err == nil, errString(err)
	})
	// The first round of each warms up; the second is the figure to compare.
	run("admin", admin)
	run("rbac-user", writer)
	run("admin", admin)
	run("rbac-user", writer)
}
