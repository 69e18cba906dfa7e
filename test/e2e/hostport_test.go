package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestHostPort is hostPort's acceptance on 2 hosts: a pod on host-1 with hostPort 18080
// answers on host-1's address from outside the site (the test process), from a pod on
// host-2 and from another pod on host-1; the port keeps answering while host-1's agent is
// stopped and after it restarted, and no longer once the pod is deleted.
func TestHostPort(t *testing.T) {
	s := newSite(t, 2)
	sideLoad(t, s)
	startSite(t, s)
	c := clientOf(t, s.Hosts[0])
	waitFor(t, 2*time.Minute, "2 Ready nodes with pod CIDRs", func() (bool, string) {
		n, state := readyNodes(s.Hosts[0])
		return n == 2, state
	})
	// Pod Security admission's baseline level forbids host ports.
	const ns = "hostport"
	_, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/warn": "privileged"}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	ctr := tool("web", "serve", "8080")
	ctr.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, HostPort: 18080}}
	ctr.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1}
	web := newPod("web", "host-1", corev1.RestartPolicyAlways, ctr)
	web.Namespace = ns
	create(t, c, web)
	waitFor(t, 90*time.Second, "pod web ready", func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return podReady(p), describe(p)
	})

	url := fmt.Sprintf("http://%s:18080/", s.Hosts[0].IP)
	answers := func(t *testing.T, what string) {
		t.Helper()
		waitFor(t, 30*time.Second, url+" answers "+what, func() (bool, string) {
			code, body, err := get(url, "")
			return code == 200 && strings.HasPrefix(body, "web "), fmt.Sprint(code, " ", body, " ", err)
		})
	}

	t.Run("from outside the site", func(t *testing.T) {
		answers(t, "from the test process")
	})
	t.Run("from pods on the other host and on the same host", func(t *testing.T) {
		for _, node := range []string{"host-2", "host-1"} {
			out, ok := runPod(t, c, s.Hosts[0], ns, "get-from-"+node, node, "get", url)
			if !ok || !strings.HasPrefix(out, "web ") {
				t.Errorf("GET %s from a pod on %s: ok=%v %q", url, node, ok, out)
			}
		}
	})
	t.Run("the port keeps answering across an agent restart", func(t *testing.T) {
		h := s.Hosts[0]
		started := agentStarts(h)
		if err := h.Stop(15 * time.Second); err != nil {
			t.Fatal(err)
		}
		answers(t, "while host-1's agent is stopped")
		restarted := time.Now()
		if err := h.Restart(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := h.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		waitAgentBack(t, c, h, restarted, started)
		// The first sync of the host ports follows the pod workers' start in the same loop,
		// after one local garbage-collection pass: 2 s of answers span it.
		holdsFor(t, 2*time.Second, url+" answers after host-1's agent restarted", func() (bool, string) {
			code, body, err := get(url, "")
			return code == 200 && strings.HasPrefix(body, "web "), fmt.Sprint(code, " ", body, " ", err)
		})
	})
	t.Run("a deleted pod's port no longer answers", func(t *testing.T) {
		if err := c.CoreV1().Pods(ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "pod web gone", func() (bool, string) {
			p, err := c.CoreV1().Pods(ns).Get(context.Background(), "web", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			return false, fmt.Sprint(describe(p), err)
		})
		code, body, err := get(url, "")
		if err == nil {
			t.Fatalf("%s still answers after the pod was deleted: %d %q", url, code, body)
		}
	})
}
