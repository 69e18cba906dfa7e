// Package api holds the acceptance tests of the Kubernetes API served by a real flotilla agent
// process (etcd embedded), driven with the real kubectl and client-go.
package api

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/test/framework"
)

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.14.2
        ports:
        - containerPort: 80
`

func TestKubectl(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{})

	t.Run("get ns shows the four system namespaces", func(t *testing.T) {
		out := a.MustKubectl("", "get", "ns")
		for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
			if !regexp.MustCompile(`(?m)^` + ns + `\s+Active\s+`).MatchString(out) {
				t.Errorf("namespace %s not Active in:\n%s", ns, out)
			}
		}
		labels := a.MustKubectl("", "get", "ns", "kube-system", "-o", "jsonpath={.metadata.labels}")
		if !strings.Contains(labels, `"kubernetes.io/metadata.name":"kube-system"`) {
			t.Errorf("kube-system labels = %s, want kubernetes.io/metadata.name", labels)
		}
	})

	t.Run("version shows the server", func(t *testing.T) {
		out := a.MustKubectl("", "version")
		if !strings.Contains(out, "Server Version: v1.37") {
			t.Errorf("kubectl version:\n%s", out)
		}
	})

	t.Run("apply, get all, scale, table columns", func(t *testing.T) {
		a.MustKubectl(deployment, "apply", "-f", "-")
		out := a.MustKubectl("", "get", "deploy", "web")
		if !regexp.MustCompile(`(?m)^NAME\s+READY\s+UP-TO-DATE\s+AVAILABLE\s+AGE\s*$`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^web\s+0/2\s+[0-2]\s+0\s+`).MatchString(out) {
			t.Errorf("get deploy:\n%s", out)
		}
		if out := a.MustKubectl("", "get", "all"); !strings.Contains(out, "deployment.apps/web") {
			t.Errorf("get all does not list the deployment:\n%s", out)
		}
		a.MustKubectl("", "scale", "deploy", "web", "--replicas=5")
		if got := a.MustKubectl("", "get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.metadata.generation}"); got != "5 2" {
			t.Errorf("after scale: replicas/generation = %q, want \"5 2\"", got)
		}
		defaults := a.MustKubectl("", "get", "deploy", "web", "-o", "jsonpath={.spec.strategy.type} {.spec.strategy.rollingUpdate.maxSurge} {.spec.revisionHistoryLimit} {.spec.template.spec.restartPolicy} {.spec.template.spec.containers[0].imagePullPolicy}")
		if defaults != "RollingUpdate 25% 10 Always IfNotPresent" {
			t.Errorf("defaults = %q", defaults)
		}
	})

	t.Run("server-side apply conflict then force", func(t *testing.T) {
		cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  key: %s\n"
		a.MustKubectl(fmt.Sprintf(cm, "one"), "apply", "--server-side", "--field-manager=alice", "-f", "-")
		_, errOut, err := a.Kubectl(fmt.Sprintf(cm, "two"), "apply", "--server-side", "--field-manager=bob", "-f", "-")
		if err == nil || !strings.Contains(errOut, "conflict") || !strings.Contains(errOut, `.data.key`) {
			t.Fatalf("second manager: err=%v stderr=%s; want a conflict on .data.key", err, errOut)
		}
		a.MustKubectl(fmt.Sprintf(cm, "two"), "apply", "--server-side", "--field-manager=bob", "--force-conflicts", "-f", "-")
		if got := a.MustKubectl("", "get", "cm", "ssa", "-o", "jsonpath={.data.key}"); got != "two" {
			t.Errorf("after force: data.key = %q", got)
		}
		managers := a.MustKubectl("", "get", "cm", "ssa", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}")
		if !strings.Contains(managers, "bob") {
			t.Errorf("managers = %q, want bob", managers)
		}
	})

	t.Run("dry-run=server stores nothing", func(t *testing.T) {
		out := a.MustKubectl("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dry\n", "apply", "--dry-run=server", "-f", "-")
		if !strings.Contains(out, "configmap/dry created (server dry run)") {
			t.Errorf("dry run output: %s", out)
		}
		if _, errOut, err := a.Kubectl("", "get", "cm", "dry"); err == nil || !strings.Contains(errOut, "NotFound") {
			t.Errorf("dry-run object was stored: err=%v %s", err, errOut)
		}
	})

	t.Run("diff", func(t *testing.T) {
		changed := strings.Replace(deployment, "nginx:1.14.2", "nginx:1.16.1", 1)
		out, _, err := a.Kubectl(changed, "diff", "-f", "-")
		var ee *exec.ExitError
		if err == nil || !asExit(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("kubectl diff exit: %v (want 1: differences found)\n%s", err, out)
		}
		if !regexp.MustCompile(`(?m)^-\s+- image: nginx:1\.14\.2$`).MatchString(out) || !regexp.MustCompile(`(?m)^\+\s+- image: nginx:1\.16\.1$`).MatchString(out) {
			t.Errorf("diff output:\n%s", out)
		}
	})

	t.Run("get -w sees a create made in parallel", func(t *testing.T) {
		// A ConfigMap that the initial list must show: once it is printed, kubectl watches
		// from that list's resourceVersion, so a later create cannot be missed.
		a.MustKubectl("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: listed\n", "create", "-f", "-")
		t.Cleanup(func() { _, _, _ = a.Kubectl("", "delete", "cm", "listed", "--ignore-not-found") })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, framework.KubectlBin(t), "--kubeconfig", a.Kubeconfig, "get", "cm", "-w", "--output-watch-events")
		var buf syncBuffer
		cmd.Stdout = &buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		deadline := time.Now().Add(20 * time.Second)
		for !regexp.MustCompile(`ADDED\s+listed`).MatchString(buf.String()) {
			if time.Now().After(deadline) {
				t.Fatalf("the initial list did not show ConfigMap listed:\n%s", buf.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		a.MustKubectl("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\n", "create", "-f", "-")
		deadline = time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if regexp.MustCompile(`ADDED\s+watched`).MatchString(buf.String()) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("watch did not report the create:\n%s", buf.String())
	})

	t.Run("explain deployment.spec.strategy", func(t *testing.T) {
		out := a.MustKubectl("", "explain", "deployment.spec.strategy")
		for _, want := range []string{"KIND:       Deployment", "rollingUpdate", "type"} {
			if !strings.Contains(out, want) {
				t.Errorf("explain lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("explain from the OpenAPI v2 document", func(t *testing.T) {
		// The server builds /openapi/v2 on its first request: this is one.
		out := a.MustKubectl("", "explain", "pods.spec.securityContext", "--output", "plaintext-openapiv2")
		for _, want := range []string{"KIND:     Pod", "runAsNonRoot", "seccompProfile"} {
			if !strings.Contains(out, want) {
				t.Errorf("explain lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("short names and categories", func(t *testing.T) {
		for _, name := range []string{"deploy", "rs", "sts", "ds", "po", "svc", "cm", "ns", "no", "ep", "ing", "pvc", "pv", "sa", "cj", "pdb", "netpol", "gitsources"} {
			if _, errOut, err := a.Kubectl("", "get", name, "-A"); err != nil {
				t.Errorf("kubectl get %s: %v %s", name, err, errOut)
			}
		}
	})

	t.Run("delete --cascade=orphan leaves the dependents", func(t *testing.T) {
		a.MustKubectl("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owner\n", "apply", "-f", "-")
		uid := a.MustKubectl("", "get", "cm", "owner", "-o", "jsonpath={.metadata.uid}")
		dep := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dependent\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: owner\n    uid: %s\n", uid)
		a.MustKubectl(dep, "apply", "-f", "-")
		a.MustKubectl("", "delete", "cm", "owner", "--cascade=orphan", "--timeout=30s")
		refs := a.MustKubectl("", "get", "cm", "dependent", "-o", "jsonpath={.metadata.ownerReferences}")
		if refs != "" {
			t.Errorf("orphaned dependent still has ownerReferences %s", refs)
		}
	})
}
