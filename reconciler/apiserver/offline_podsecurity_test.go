package apiserver

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func mustObject(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// TestPodSecurityOffline: the offline check refuses and warns as the site's Pod Security
// admission does, with the levels of the revision's Namespaces.
func TestPodSecurityOffline(t *testing.T) {
	const pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: NS}\nspec:\n  containers:\n  - {name: c, image: app:1, securityContext: {privileged: true}}\n"
	const deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: default}\nspec:\n  selector: {matchLabels: {a: b}}\n" +
		"  template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers:\n      - {name: c, image: app:1, securityContext: {privileged: true}}\n"
	open := mustObject(t, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: open\n  labels: {pod-security.kubernetes.io/enforce: privileged, pod-security.kubernetes.io/warn: privileged}\n")
	bad := mustObject(t, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: bad\n  labels: {pod-security.kubernetes.io/enforce: lax}\n")
	c, err := NewPodSecurityOffline("", []*unstructured.Unstructured{open})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	_, refused := c.Check(ctx, mustObject(t, strings.Replace(pod, "NS", "default", 1)))
	if refused == nil || !strings.Contains(refused.Error(), `pods "p" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)`) {
		t.Errorf("privileged Pod in default: %v, want refused at the site default level", refused)
	}
	if ws, refused := c.Check(ctx, mustObject(t, strings.Replace(pod, "NS", "open", 1))); refused != nil || len(ws) != 0 {
		t.Errorf("privileged Pod in namespace open (enforce privileged): %v %q, want admitted", refused, ws)
	}
	ws, refused := c.Check(ctx, mustObject(t, deploy))
	if refused != nil || len(ws) != 1 || !strings.Contains(ws[0], `would violate PodSecurity "baseline:latest": privileged`) {
		t.Errorf("privileged Deployment: %v %q, want admitted with a warning", refused, ws)
	}
	if _, refused := c.Check(ctx, bad); refused == nil || !strings.Contains(refused.Error(), "pod-security.kubernetes.io/enforce") {
		t.Errorf("Namespace with an unknown level: %v, want refused", refused)
	}
	if ws, refused := c.Check(ctx, mustObject(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")); refused != nil || ws != nil {
		t.Errorf("ConfigMap: %v %q", refused, ws)
	}
}
