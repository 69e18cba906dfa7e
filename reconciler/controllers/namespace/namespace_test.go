package namespace

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/test/controllertest"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// startController starts a real agent and runs the namespace controller in-process against it.
func startController(t *testing.T) (*framework.Agent, kubernetes.Interface) {
	t.Helper()
	a, c, _ := controllertest.StartController(t, New)
	return a, c
}

const content = `apiVersion: v1
kind: Namespace
metadata:
  name: x
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: x}
data: {a: b}
---
apiVersion: v1
kind: Secret
metadata: {name: token, namespace: x}
stringData: {t: s3cret}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: x}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx:1.14.2}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: x}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: loose, namespace: x}
spec:
  containers: [{name: c, image: busybox:1.36}]
`

func count(t *testing.T, a *framework.Agent, ns string) string {
	t.Helper()
	out, _, _ := a.Kubectl("", "-n", ns, "get", "configmaps,secrets,deployments,services,pods", "-o", "name")
	return strings.TrimSpace(out)
}

func TestNamespaceDeletion(t *testing.T) {
	a, c := startController(t)
	ctx := context.Background()

	t.Run("kubectl delete ns removes the namespace and everything in it", func(t *testing.T) {
		a.MustKubectl(content, "apply", "-f", "-")
		if got := count(t, a, "x"); strings.Count(got, "\n") < 4 {
			t.Fatalf("content not created: %q", got)
		}
		start := time.Now()
		// kubectl waits for the namespace to be gone.
		a.MustKubectl("", "delete", "ns", "x", "--timeout=30s")
		took := time.Since(start)
		if _, err := c.CoreV1().Namespaces().Get(ctx, "x", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("namespace x still there after kubectl delete returned: %v", err)
		}
		t.Logf("namespace x deleted in %s", took.Round(time.Millisecond))
		if took > 30*time.Second {
			t.Errorf("deletion took %s, want under 30s", took)
		}
		// Objects of a namespace that no longer exists are still listable if they were left
		// in storage: nothing may be left.
		if left := count(t, a, "x"); left != "" {
			t.Errorf("left in storage after the namespace went:\n%s", left)
		}
	})

	t.Run("a namespace with 50 objects is emptied and removed; creates in it are refused meanwhile", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: bulk\n")
		for i := 0; i < 25; i++ {
			fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d, namespace: bulk}\ndata: {i: \"%d\"}\n", i, i)
			fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s-%d, namespace: bulk}\nstringData: {i: \"%d\"}\n", i, i)
		}
		a.MustKubectl(b.String(), "apply", "-f", "-")
		if got := strings.Count(count(t, a, "bulk"), "\n") + 1; got < 50 {
			t.Fatalf("%d objects created, want 50", got)
		}
		// A finalizer holds one object so the namespace stays Terminating long enough to
		// check that creates are refused.
		a.MustKubectl("", "-n", "bulk", "patch", "cm", "cm-0", "--type=merge", "-p", `{"metadata":{"finalizers":["example.com/hold"]}}`)
		a.MustKubectl("", "delete", "ns", "bulk", "--wait=false")
		_, errOut, err := a.Kubectl("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late, namespace: bulk}\n", "create", "-f", "-")
		if err == nil || !strings.Contains(errOut, "is being terminated") {
			t.Errorf("create in a Terminating namespace: err=%v %s, want Forbidden ... is being terminated", err, errOut)
		}
		a.MustKubectl("", "-n", "bulk", "patch", "cm", "cm-0", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := c.CoreV1().Namespaces().Get(ctx, "bulk", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("namespace bulk still there after 30s: %v; left: %s", err, count(t, a, "bulk"))
			}
			time.Sleep(200 * time.Millisecond)
		}
		if left := count(t, a, "bulk"); left != "" {
			t.Errorf("left in storage:\n%s", left)
		}
	})

	t.Run("terminating namespace reports remaining content and finalizers, then goes", func(t *testing.T) {
		a.MustKubectl(`apiVersion: v1
kind: Namespace
metadata: {name: held}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: held, namespace: held, finalizers: [example.com/hold]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: free, namespace: held}
`, "apply", "-f", "-")
		a.MustKubectl("", "delete", "ns", "held", "--wait=false")

		want := map[corev1.NamespaceConditionType]string{
			corev1.NamespaceDeletionDiscoveryFailure: "False/ResourcesDiscovered",
			corev1.NamespaceDeletionContentFailure:   "False/ContentDeleted",
			corev1.NamespaceContentRemaining:         "True/SomeResourcesRemain/Some resources are remaining: configmaps. has 1 resource instances",
			corev1.NamespaceFinalizersRemaining:      "True/SomeFinalizersRemain/Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances",
		}
		var ns *corev1.Namespace
		poll(t, 15*time.Second, "conditions of the held namespace", func() (bool, string) {
			var err error
			if ns, err = c.CoreV1().Namespaces().Get(ctx, "held", metav1.GetOptions{}); apierrors.IsNotFound(err) {
				_, cerr := c.CoreV1().ConfigMaps("held").Get(ctx, "held", metav1.GetOptions{})
				t.Fatalf("namespace held was removed while configmap held/held (finalizer example.com/hold) remained "+
					"(configmap lookup: %s): the API server must keep a namespace while spec.finalizers is not empty, "+
					"also on updates (genericregistry Store.ShouldDeleteDuringUpdate)", errString(cerr))
			} else if err != nil {
				return false, err.Error()
			}
			for ct, w := range want {
				if !matches(ns, ct, w) {
					return false, toJSON(ns.Status)
				}
			}
			return true, ""
		})
		if ns.Status.Phase != corev1.NamespaceTerminating || len(ns.Spec.Finalizers) != 1 {
			t.Errorf("held namespace: phase %s, spec.finalizers %v; want Terminating, [kubernetes]", ns.Status.Phase, ns.Spec.Finalizers)
		}
		if _, err := c.CoreV1().ConfigMaps("held").Get(ctx, "free", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("configmap without finalizer not deleted: %v", err)
		}

		// Release the finalizer: the namespace finishes.
		if _, err := c.CoreV1().ConfigMaps("held").Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, 30*time.Second, "held namespace removed", func() (bool, string) {
			_, err := c.CoreV1().Namespaces().Get(ctx, "held", metav1.GetOptions{})
			return apierrors.IsNotFound(err), errString(err)
		})
	})
}

func matches(ns *corev1.Namespace, ct corev1.NamespaceConditionType, want string) bool {
	for _, c := range ns.Status.Conditions {
		if c.Type == ct {
			got := string(c.Status) + "/" + c.Reason + "/" + c.Message
			return strings.HasPrefix(got, want)
		}
	}
	return false
}

func poll(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
	}
	t.Fatalf("%s: not within %s: %s", what, timeout, last)
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func errString(err error) string {
	if err == nil {
		return "present"
	}
	return err.Error()
}
