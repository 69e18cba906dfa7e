package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// userKubeconfig runs `flotilla kubeconfig create` on host h and returns the file.
func userKubeconfig(t testing.TB, h *devsite.Host, user string, extra ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), user+".kubeconfig")
	args := append([]string{"kubeconfig", "create", "--data-dir", h.DataDir, "--user", user, "--out", out}, extra...)
	if b, err := exec.Command(framework.FlotillaBin(t), args...).CombinedOutput(); err != nil {
		t.Fatalf("flotilla %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// kubectlAs runs kubectl with another kubeconfig than the host's admin one.
func kubectlAs(h *devsite.Host, kubeconfig, stdin string, args ...string) (string, error) {
	return h.Kubectl(context.Background(), stdin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

func podLogs(c kubernetes.Interface, ns, name string) string {
	b, err := c.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		return "logs: " + err.Error()
	}
	return string(b)
}

// TestAccessControl is RBAC's acceptance on a real host: users with client certificates,
// escalation checks, a pod's ServiceAccount token used by client-go from inside the pod
// (refreshed while it runs, refused once its pod is gone) and a plan-only credential.
func TestAccessControl(t *testing.T) {
	// Tokens of 40 s at most, so that pods' tokens are refreshed within the test.
	s, c := startPodSite(t, 1, "--service-account-max-token-ttl=40s")
	h := s.Hosts[0]
	ctx := context.Background()
	for _, ns := range []string{"dev", "prod"} {
		kubectlOut(t, h, "create", "namespace", ns)
	}
	alice := userKubeconfig(t, h, "alice", "--ttl", "1h")
	kubectlOut(t, h, "create", "rolebinding", "alice-edit", "-n", "dev", "--clusterrole", "edit", "--user", "alice")
	bob := userKubeconfig(t, h, "bob", "--group", "team-b")
	kubectlOut(t, h, "create", "rolebinding", "team-b-admin", "-n", "dev", "--clusterrole", "admin", "--group", "team-b")

	t.Run("alice edits dev and nothing else", func(t *testing.T) {
		if out, err := kubectlAs(h, alice, "", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || out != "alice" {
			t.Errorf("kubectl auth whoami: %q, %v", out, err)
		}
		// The binding reaches the authorizer's cache within a moment.
		waitFor(t, 30*time.Second, "alice creates a Deployment in dev", func() (bool, string) {
			out, err := kubectlAs(h, alice, "", "create", "deployment", "web", "-n", "dev", "--image", toolbox)
			return err == nil, out + errString(err)
		})
		_, err := kubectlAs(h, alice, "", "create", "deployment", "web", "-n", "prod", "--image", toolbox)
		want := `User "alice" cannot create resource "deployments" in API group "apps" in the namespace "prod"`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("alice creating in prod: want 403 %q, got %v", want, err)
		}
		_, err = kubectlAs(h, alice, "", "create", "rolebinding", "sneaky", "-n", "dev", "--clusterrole", "cluster-admin", "--user", "alice")
		if err == nil || !strings.Contains(err.Error(), `cannot create resource "rolebindings"`) {
			t.Errorf("alice binding cluster-admin: want 403, got %v", err)
		}
	})

	t.Run("escalation is refused to who may write bindings", func(t *testing.T) {
		waitFor(t, 30*time.Second, "bob (admin of dev) binds edit in dev", func() (bool, string) {
			out, err := kubectlAs(h, bob, "", "create", "rolebinding", "carol-edit", "-n", "dev", "--clusterrole", "edit", "--user", "carol")
			return err == nil, out + errString(err)
		})
		_, err := kubectlAs(h, bob, "", "create", "rolebinding", "bob-root", "-n", "dev", "--clusterrole", "cluster-admin", "--group", "team-b")
		if err == nil || !strings.Contains(err.Error(), "attempting to grant RBAC permissions not currently held") {
			t.Errorf("bob binding cluster-admin: want the escalation refusal, got %v", err)
		}
		role := "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: nodes-reader, namespace: dev}\n" +
			"rules:\n- {apiGroups: [\"\"], resources: [nodes], verbs: [get]}\n- {apiGroups: [\"\"], resources: [pods], verbs: [get]}\n"
		_, err = kubectlAs(h, bob, role, "apply", "-f", "-")
		if err == nil || !strings.Contains(err.Error(), "attempting to grant RBAC permissions not currently held") || !strings.Contains(err.Error(), "nodes") {
			t.Errorf("bob writing a Role granting nodes: want the escalation refusal naming nodes, got %v", err)
		}
	})

	t.Run("kubectl auth can-i --list matches edit", func(t *testing.T) {
		out := kubectlOut(t, h, "auth", "can-i", "--list", "-n", "dev", "--as", "alice")
		verbs := map[string][]string{}
		for _, m := range regexp.MustCompile(`(?m)^(\S+)\s+\[\]\s+\[\]\s+\[([a-z ]+)\]`).FindAllStringSubmatch(out, -1) {
			verbs[m[1]] = append(verbs[m[1]], strings.Fields(m[2])...)
		}
		readWrite := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
		for resource, want := range map[string][]string{
			"deployments.apps": readWrite, "secrets": readWrite, "pods/exec": {"create", "get"}, "configmaps": readWrite,
			"selfsubjectaccessreviews.authorization.k8s.io": {"create"}, "endpoints": {"get", "list", "watch"},
		} {
			for _, v := range want {
				if !contains(verbs[resource], v) {
					t.Errorf("can-i --list: %s lacks %s (has %v):\n%s", resource, v, verbs[resource], out)
				}
			}
		}
		if contains(verbs["endpoints"], "create") {
			t.Errorf("can-i --list: edit may not create endpoints:\n%s", out)
		}
		if strings.Contains(out, "rolebindings") || regexp.MustCompile(`(?m)^\*\.\*`).MatchString(out) {
			t.Errorf("can-i --list shows more than edit:\n%s", out)
		}
		if out, _ := h.Kubectl(ctx, "", "auth", "can-i", "create", "deployments", "-n", "prod", "--as", "alice"); !strings.HasPrefix(out, "no") {
			t.Errorf("can-i create deployments in prod as alice: %q", out)
		}
	})

	t.Run("a pod lists pods with its ServiceAccount token, refreshed while it runs", func(t *testing.T) {
		apply(t, h, `apiVersion: v1
kind: ServiceAccount
metadata: {name: lister, namespace: dev}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-lister, namespace: dev}
rules:
- {apiGroups: [""], resources: [pods], verbs: [list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: lister, namespace: dev}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-lister}
subjects:
- {kind: ServiceAccount, name: lister, namespace: dev}
`)
		// The default mount (kube-api-access-*), with the Kubernetes token lifetime.
		lister := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "lister", Namespace: "dev"}, Spec: corev1.PodSpec{
			ServiceAccountName: "lister", RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{tool("kube", "kube", "list", "pods")}}}
		secrets := lister.DeepCopy()
		secrets.Name, secrets.Spec.Containers = "secrets", []corev1.Container{tool("kube", "kube", "list", "secrets")}
		// A long-running client; its token lives 40 s (the site's maximum) and is refreshed at
		// 80 % of that.
		watcher := lister.DeepCopy()
		watcher.Name, watcher.Spec.RestartPolicy = "watcher", corev1.RestartPolicyAlways
		watcher.Spec.Containers = []corev1.Container{tool("kube", "kube", "watch-list", "pods", "dev", "2s")}
		for _, p := range []*corev1.Pod{lister, secrets, watcher} {
			if _, err := c.CoreV1().Pods("dev").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create pod %s: %v", p.Name, err)
			}
		}
		got, err := c.CoreV1().Pods("dev").Get(ctx, "lister", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Spec.Volumes) != 1 || !strings.HasPrefix(got.Spec.Volumes[0].Name, "kube-api-access-") {
			t.Errorf("pod lister has no kube-api-access volume: %+v", got.Spec.Volumes)
		}
		finished := func(name string) func() (bool, string) {
			return func() (bool, string) {
				p, err := c.CoreV1().Pods("dev").Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, describe(p)
			}
		}
		waitFor(t, 2*time.Minute, "pod lister finished", finished("lister"))
		waitFor(t, 2*time.Minute, "pod secrets finished", finished("secrets"))
		if p, _ := c.CoreV1().Pods("dev").Get(ctx, "lister", metav1.GetOptions{}); p.Status.Phase != corev1.PodSucceeded ||
			!strings.Contains(podLogs(c, "dev", "lister"), "lister") {
			t.Errorf("client-go in pod lister: %s\n%s", describe(p), podLogs(c, "dev", "lister"))
		}
		want := `User "system:serviceaccount:dev:lister" cannot list resource "secrets" in API group "" in the namespace "dev"`
		if p, _ := c.CoreV1().Pods("dev").Get(ctx, "secrets", metav1.GetOptions{}); p.Status.Phase != corev1.PodFailed ||
			!strings.Contains(podLogs(c, "dev", "secrets"), want) {
			t.Errorf("pod secrets: want failure with %q: %s\n%s", want, describe(p), podLogs(c, "dev", "secrets"))
		}

		// The watcher's first token, then a refreshed one in the same running container.
		token := func() string {
			out, err := h.Kubectl(ctx, "", "exec", "-n", "dev", "watcher", "--", "/app", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
			if err != nil {
				return ""
			}
			return strings.TrimSpace(out)
		}
		var first string
		waitFor(t, 2*time.Minute, "watcher running with a token", func() (bool, string) {
			first = token()
			return first != "", podLogs(c, "dev", "watcher")
		})
		issued := time.Now()
		waitFor(t, 60*time.Second, "the watcher's token refreshed", func() (bool, string) {
			tk := token()
			return tk != "" && tk != first, "same token"
		})
		// Past the first token's expiry, the same process still lists pods.
		time.Sleep(time.Until(issued.Add(45 * time.Second)))
		mark := len(podLogs(c, "dev", "watcher"))
		waitFor(t, 30*time.Second, "the watcher lists pods after its first token expired", func() (bool, string) {
			logs := podLogs(c, "dev", "watcher")
			return len(logs) > mark && strings.Contains(logs[mark:], "ok "), logs
		})
		if p, _ := c.CoreV1().Pods("dev").Get(ctx, "watcher", metav1.GetOptions{}); p != nil && len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("watcher restarted: %s", describe(p))
		}

		// A token outlives nothing: once its pod is deleted, the API refuses it.
		tk := token()
		tokenClient := kubernetes.NewForConfigOrDie(&rest.Config{Host: apiURL(t, h), BearerToken: tk,
			TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(h.DataDir, "pki", "ca.crt")}})
		if _, err := tokenClient.CoreV1().Pods("dev").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("the watcher's token from outside the pod: %v", err)
		}
		if err := c.CoreV1().Pods("dev").Delete(ctx, "watcher", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "the deleted pod's token refused", func() (bool, string) {
			_, err := tokenClient.CoreV1().Pods("dev").List(ctx, metav1.ListOptions{})
			return apierrors.IsUnauthorized(err), errString(err)
		})
	})

	t.Run("a plan-only credential plans, cannot apply, never sees a Secret value", func(t *testing.T) {
		ci := userKubeconfig(t, h, "ci", "--plan-only")
		if _, err := c.CoreV1().Secrets("dev").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "dev"},
			StringData: map[string]string{"password": "live-hunter2", "user": "app"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		repo := t.TempDir()
		manifest := `apiVersion: v1
kind: Secret
metadata: {name: db, namespace: dev}
stringData: {password: git-s3cret, user: app}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: dev}
data: {color: blue}
`
		if err := os.WriteFile(filepath.Join(repo, "app.yaml"), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, format := range []string{"text", "markdown", "json"} {
			cmd := exec.Command(framework.FlotillaBin(t), "plan", "--kubeconfig", ci, "--output", format, "--detailed-exitcode", repo)
			b, err := cmd.CombinedOutput()
			out := string(b)
			if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 2) {
				t.Errorf("flotilla plan -o %s with the plan-only kubeconfig: %v\n%s", format, err, out)
				continue
			}
			if !strings.Contains(out, "settings") || !strings.Contains(out, "(value changed)") {
				t.Errorf("plan -o %s does not show the ConfigMap create and the Secret change:\n%s", format, out)
			}
			for _, secret := range []string{"live-hunter2", "git-s3cret", "bGl2ZS1odW50ZXIy", "Z2l0LXMzY3JldA=="} {
				if strings.Contains(out, secret) {
					t.Errorf("plan -o %s shows a Secret value (%s):\n%s", format, secret, out)
				}
			}
		}
		_, err := kubectlAs(h, ci, manifest, "apply", "-f", "-")
		if err == nil || !strings.Contains(err.Error(), "plan-only credential") {
			t.Errorf("kubectl apply with the plan-only kubeconfig: want refused, got %v", err)
		}
		if _, err := c.CoreV1().ConfigMaps("dev").Get(ctx, "settings", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the refused apply created ConfigMap settings: %v", err)
		}
		out, err := kubectlAs(h, ci, "", "get", "secret", "db", "-n", "dev", "-o", "jsonpath={.data.password}")
		if err != nil || out == "" || strings.Contains(out, "bGl2ZS1odW50ZXIy") {
			t.Errorf("kubectl get secret as the planner: %q, %v", out, err)
		}
		if _, err := kubectlAs(h, ci, "", "auth", "can-i", "get", "pods", "-A"); err != nil {
			t.Errorf("the planner cannot review its own access: %v", err)
		}
	})

	t.Run("the site's components hold their own roles", func(t *testing.T) {
		crb, err := c.RbacV1().ClusterRoleBindings().Get(ctx, "system:node", metav1.GetOptions{})
		if err != nil || len(crb.Subjects) == 0 || crb.Subjects[0].Kind != rbacv1.GroupKind || crb.Subjects[0].Name != "system:nodes" {
			t.Errorf("ClusterRoleBinding system:node: %+v %v", crb, err)
		}
		if strings.Contains(h.Logs(), "a flotilla component was denied a request") {
			var lines []string
			for _, l := range strings.Split(h.Logs(), "\n") {
				if strings.Contains(l, "a flotilla component was denied") {
					lines = append(lines, l)
				}
			}
			t.Errorf("components were denied requests:\n%s", strings.Join(first(lines, 20), "\n"))
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// apiURL is the server of the host's admin kubeconfig.
func apiURL(t *testing.T, h *devsite.Host) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", h.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Host
}
