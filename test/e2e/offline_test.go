package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// clusterDNS is the devsite's cluster DNS address (the default --cluster-dns).
const clusterDNS = "10.96.0.10"

// testRebootWhileCutOff: a host cut off from the others keeps serving its pods through its
// Service rules, cluster DNS and Ingress; rebooted while still cut off (everything killed,
// what a reboot clears cleared), it starts the pods it last had from its checkpoint and its
// Ingress, DNS and Service rules serve them again; once healed it follows the API: a pod
// deleted meanwhile stops (the agent finishes its deletion), its replacement runs.
func testRebootWhileCutOff(t *testing.T, s *devsite.Site, c kubernetes.Interface) {
	edge := s.Hosts[2]
	ctx := context.Background()
	// Tolerating an unreachable host for ever: the pods stay bound to the cut-off host
	// rather than being evicted, as an edge site's pods pinned to their box would.
	tolerate := []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "edge"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "edge"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{tool("web", "serve", "8080")},
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": edge.Name},
					Tolerations:                   tolerate,
					TerminationGracePeriodSeconds: ptr.To(int64(1))},
			},
		},
	}
	if _, err := c.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "edge"},
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	svcOut, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clusterIP := svcOut.Spec.ClusterIP
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
		Host: "edge.example", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
			Path: "/", PathType: ptr.To(networkingv1.PathTypePrefix),
			Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "edge", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}}
	if _, err := c.NetworkingV1().Ingresses("default").Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []string
	waitFor(t, 2*time.Minute, "2 edge pods Ready on "+edge.Name, func() (bool, string) {
		list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=edge"})
		if err != nil {
			return false, err.Error()
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if podReady(&p) && p.Spec.NodeName == edge.Name && p.DeletionTimestamp == nil {
				pods = append(pods, p.Name)
			}
		}
		sort.Strings(pods)
		return len(pods) == 2, fmt.Sprint(pods)
	})
	url := "http://" + edge.IP + "/"
	// serves checks that edge's Ingress, its cluster DNS and the Service's ClusterIP (from
	// edge's own network namespace) answer with exactly the pods in want.
	serves := func(what string, timeout time.Duration, want ...string) {
		t.Helper()
		waitFor(t, timeout, what, func() (bool, string) {
			seen, err := answeringPods(url, "edge.example", 12)
			if err != nil {
				return false, "ingress: " + err.Error()
			}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				return false, fmt.Sprintf("ingress answered from %v, want %v", seen, want)
			}
			var ip string
			if err := inNetNS(edge, func() error {
				var err error
				if ip, err = lookupA(clusterDNS, "edge.default.svc.cluster.local."); err != nil {
					return fmt.Errorf("cluster DNS: %w", err)
				}
				if ip != clusterIP {
					return fmt.Errorf("cluster DNS answers %s, want the ClusterIP %s", ip, clusterIP)
				}
				return httpGetRaw(net.JoinHostPort(clusterIP, "80"))
			}); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
	}
	serves("edge's Ingress, DNS and ClusterIP serve both pods", time.Minute, pods...)
	// The checkpoint is written a moment after each change: wait until it holds both pods'
	// endpoints before cutting the host off.
	waitFor(t, 30*time.Second, "edge's checkpoint holds both pods' endpoints", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(edge.DataDir, "checkpoint", "endpointslices.json"))
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods {
			if !strings.Contains(string(b), `"name":"`+p+`"`) {
				return false, p + " not in the checkpoint yet"
			}
		}
		return true, ""
	})

	if err := edge.Partition(); err != nil {
		t.Fatal(err)
	}
	healed := false
	defer func() {
		if !healed {
			edge.Heal()
		}
	}()
	waitFor(t, nodeGrace+time.Minute, "the majority sees "+edge.Name+" not Ready", func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, edge.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status != corev1.ConditionTrue, string(cond.Status)
			}
		}
		return false, "no Ready condition"
	})
	serves("cut off, edge still serves both pods", 30*time.Second, pods...)

	// While edge is away, the site deletes one of its pods; the Deployment's replacement
	// cannot be scheduled until edge is back.
	deleted, kept := pods[0], pods[1]
	if err := c.CoreV1().Pods("default").Delete(ctx, deleted, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := edge.PowerOff(); err != nil {
		t.Fatal(err)
	}
	booted := time.Now()
	if err := edge.Restart(); err != nil {
		t.Fatal(err)
	}
	// It cannot know of the deletion: both pods run again, from the checkpoint.
	serves("rebooted while cut off, edge serves both pods from its checkpoint", 2*time.Minute, pods...)
	framework.Figure(t, "host rebooted while cut off: Ingress, DNS and ClusterIP serve its pods again %s after the boot",
		time.Since(booted).Round(100*time.Millisecond))
	if _, err := os.Stat(edge.Kubeconfig()); err == nil {
		// The kubeconfig is written once the API is ready; cut off it must not be.
		if _, kerr := edge.Kubectl(ctx, "", "get", "ns", "default"); kerr == nil {
			t.Errorf("%s's API answers while it is cut off from the quorum", edge.Name)
		}
	}

	edge.Heal()
	healed = true
	healedAt := time.Now()
	waitFor(t, 3*time.Minute, "the pod deleted meanwhile is gone (edge stopped it) and its replacement runs", func() (bool, string) {
		if _, err := c.CoreV1().Pods("default").Get(ctx, deleted, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("%s still there (%v)", deleted, err)
		}
		n, state := availableReplicas(c, "default", "edge")
		return n == 2, state
	})
	var now []string
	list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=edge"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			now = append(now, p.Name)
		}
	}
	sort.Strings(now)
	if !contains(now, kept) {
		t.Errorf("pods after the heal %v lack %s, which was never deleted", now, kept)
	}
	serves("healed, edge serves the current pods only", time.Minute, now...)
	framework.Figure(t, "healed: the deleted pod stopped and the site converged %s after the heal", time.Since(healedAt).Round(100*time.Millisecond))
	waitFor(t, 2*time.Minute, edge.Name+" serves the API again", func() (bool, string) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := edge.Kubectl(cctx, "", "get", "ns", "default", "-o", "name")
		return err == nil, fmt.Sprint(err)
	})
	if err := c.AppsV1().Deployments("default").Delete(ctx, "edge", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// answeringPods sends n requests to url with host and returns the sorted set of pods that
// answered (the toolbox's serve answers "<pod> <node>").
func answeringPods(url, host string, n int) ([]string, error) {
	set := map[string]bool{}
	for i := 0; i < n; i++ {
		code, body, err := get(url, host)
		if err != nil {
			return nil, err
		}
		if code != 200 {
			return nil, fmt.Errorf("HTTP %d: %s", code, strings.TrimSpace(body))
		}
		set[strings.Fields(body + " ")[0]] = true
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// inNetNS runs f on a thread in h's network namespace. f must do its I/O on its own
// goroutine (no http.Client: its dials run elsewhere).
func inNetNS(h *devsite.Host, f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	ns, err := netns.GetFromName(h.NetNS)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: the runtime ends it with the goroutine.
		return fmt.Errorf("back to the test's network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// lookupA asks server for name's A record.
func lookupA(server, name string) (string, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	cl := &dns.Client{Timeout: 2 * time.Second}
	r, _, err := cl.Exchange(m, net.JoinHostPort(server, "53"))
	if err != nil {
		return "", err
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String(), nil
		}
	}
	return "", fmt.Errorf("no A record (%s)", dns.RcodeToString[r.Rcode])
}

// httpGetRaw does a GET / over a connection dialed on the calling goroutine and requires 200.
func httpGetRaw(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr); err != nil {
		return err
	}
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("GET %s: %w", addr, err)
	}
	if !strings.Contains(status, " 200 ") {
		return fmt.Errorf("GET %s: %s", addr, strings.TrimSpace(status))
	}
	return nil
}
