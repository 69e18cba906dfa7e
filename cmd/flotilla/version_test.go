package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/flotilla-dev/flotilla/nodes/host"
)

func TestPrintSiteVersions(t *testing.T) {
	node := func(name, kubelet string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: kubelet},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	}
	c := fake.NewClientset(
		node("host-2", host.NodeVersion("v1.37.2", "v0.5.0"), corev1.ConditionTrue),
		node("host-1", host.NodeVersion("v1.37.2", "v0.4.1-3-gabcdef"), corev1.ConditionFalse),
		node("other", "v1.31.0", corev1.ConditionTrue),
	)
	var out bytes.Buffer
	if err := printSiteVersions(context.Background(), c, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := [][]string{
		{"HOST", "FLOTILLA", "KUBERNETES", "READY"},
		{"host-1", "v0.4.1-3-gabcdef", "v1.37.2", "False"},
		{"host-2", "v0.5.0", "v1.37.2", "True"},
		{"other", "unknown", "v1.31.0", "True"},
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d: got %q, want %q", i, lines[i], strings.Join(w, " "))
		}
	}
	if !strings.Contains(out.String(), "the site runs 3 versions") {
		t.Errorf("no summary of the versions in:\n%s", out.String())
	}
}
