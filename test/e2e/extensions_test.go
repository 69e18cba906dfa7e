package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// hookApp runs the toolbox's admission webhooks behind the Service default/hook, with a
// certificate for hook.default.svc.
func hookApp(cert, key []byte) string {
	indent := func(b []byte) string {
		return strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "\n              ")
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: hook}
spec:
  replicas: 1
  selector: {matchLabels: {app: hook}}
  template:
    metadata: {labels: {app: hook}}
    spec:
      nodeName: host-2
      containers:
      - name: hook
        image: %s
        imagePullPolicy: IfNotPresent
        command: [/app, webhook, "8443"]
        env:
        - name: TLS_CERT
          value: |
              %s
        - name: TLS_KEY
          value: |
              %s
        readinessProbe:
          httpGet: {path: /healthz, port: 8443, scheme: HTTPS}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: hook}
spec:
  selector: {app: hook}
  ports: [{port: 443, targetPort: 8443}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: flavours}
spec:
  replicas: 1
  selector: {matchLabels: {app: flavours}}
  template:
    metadata: {labels: {app: flavours}}
    spec:
      containers:
      - name: api
        image: %s
        imagePullPolicy: IfNotPresent
        command: [/app, apiserver, "8443", flavours.example.flotilla.dev, v1]
        readinessProbe:
          httpGet: {path: /healthz, port: 8443, scheme: HTTPS}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: flavours}
spec:
  selector: {app: flavours}
  ports: [{port: 443, targetPort: 8443}]
`, toolbox, indent(cert), indent(key), toolbox)
}

func webhookConfigs(caBundle []byte) string {
	ca := base64.StdEncoding.EncodeToString(caBundle)
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: deny-labelled}
webhooks:
- name: deny.toolbox.flotilla.dev
  clientConfig:
    service: {namespace: default, name: hook, path: /validate}
    caBundle: %[1]s
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  namespaceSelector: {matchLabels: {hooks: "on"}}
  objectSelector: {matchExpressions: [{key: skip-hooks, operator: DoesNotExist}]}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 5
- name: slow.toolbox.flotilla.dev
  clientConfig:
    service: {namespace: default, name: hook, path: /slow}
    caBundle: %[1]s
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [secrets]}
  namespaceSelector: {matchLabels: {hooks: "on"}}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 2
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: annotate}
webhooks:
- name: annotate.toolbox.flotilla.dev
  clientConfig:
    service: {namespace: default, name: hook, path: /mutate}
    caBundle: %[1]s
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  namespaceSelector: {matchLabels: {hooks: "on"}}
  matchConditions:
  - name: not-skipped
    expression: "!has(object.metadata.labels) || !('skip-hooks' in object.metadata.labels)"
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
`, ca)
}

const flavoursAPIService = `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.flavours.example.flotilla.dev}
spec:
  group: flavours.example.flotilla.dev
  version: v1
  service: {namespace: default, name: flavours, port: 443}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 1000
  versionPriority: 15
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.nowhere.example.flotilla.dev}
spec:
  group: nowhere.example.flotilla.dev
  version: v1
  service: {namespace: default, name: nowhere, port: 443}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 1000
  versionPriority: 15
---
apiVersion: v1
kind: Service
metadata: {name: nowhere}
spec:
  selector: {app: nowhere}
  ports: [{port: 443, targetPort: 8443}]
`

// TestWebhooksAndAggregation: admission webhooks and an aggregated API served by pods of the
// site, reached by the API server of another host.
func TestWebhooksAndAggregation(t *testing.T) {
	s, c := startPodSite(t, 2)
	h := s.Hosts[0]
	ctx := context.Background()

	cert, key, err := certutil.GenerateSelfSignedCertKey("hook.default.svc", nil, []string{"hook.default.svc.cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	apply(t, h, hookApp(cert, key))
	waitFor(t, 2*time.Minute, "hook and flavours available", func() (bool, string) {
		a, msg := availableReplicas(c, "default", "hook")
		b, msg2 := availableReplicas(c, "default", "flavours")
		return a == 1 && b == 1, msg + " " + msg2
	})
	apply(t, h, webhookConfigs(cert))
	kubectlOut(t, h, "create", "namespace", "guarded")
	kubectlOut(t, h, "label", "namespace", "guarded", "hooks=on")

	configMap := func(name string, labels map[string]string) error {
		_, err := c.CoreV1().ConfigMaps("guarded").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		return err
	}

	t.Run("a webhook served by a pod denies a labelled ConfigMap", func(t *testing.T) {
		// The webhook informers see the new configurations within a moment.
		waitFor(t, 30*time.Second, "labelled ConfigMap denied", func() (bool, string) {
			err := configMap(fmt.Sprintf("denied-%d", time.Now().UnixNano()), map[string]string{"deny": "true"})
			return err != nil && strings.Contains(err.Error(), "deny.toolbox.flotilla.dev") &&
				strings.Contains(err.Error(), "denied by toolbox"), fmt.Sprint(err)
		})
		if err := configMap("plain", nil); err != nil {
			t.Fatalf("unlabelled ConfigMap refused: %v", err)
		}
		cm, err := c.CoreV1().ConfigMaps("guarded").Get(ctx, "plain", metav1.GetOptions{})
		if err != nil || cm.Annotations["toolbox.flotilla.dev/mutated"] != "true" {
			t.Errorf("mutating webhook did not annotate: %v %v", cm.GetAnnotations(), err)
		}
		if err := configMap("skipped", map[string]string{"deny": "true", "skip-hooks": "yes"}); err != nil {
			t.Errorf("objectSelector should skip the webhook: %v", err)
		}
		cm, _ = c.CoreV1().ConfigMaps("guarded").Get(ctx, "skipped", metav1.GetOptions{})
		if cm != nil && cm.Annotations["toolbox.flotilla.dev/mutated"] != "" {
			t.Errorf("matchConditions should skip the mutating webhook: %v", cm.Annotations)
		}
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "outside", Labels: map[string]string{"deny": "true"}}}, metav1.CreateOptions{}); err != nil {
			t.Errorf("namespaceSelector should skip namespace default: %v", err)
		}
	})

	t.Run("a CRD converts between versions through a webhook served by a pod", func(t *testing.T) {
		apply(t, h, fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: paints.example.flotilla.dev}
spec:
  group: example.flotilla.dev
  scope: Namespaced
  names: {plural: paints, singular: paint, kind: Paint}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        service: {namespace: default, name: hook, path: /convert}
        caBundle: %s
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {colour: {type: string}}}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {color: {type: string}}}
`, base64.StdEncoding.EncodeToString(cert)))
		waitFor(t, 30*time.Second, "a v1 paint created", func() (bool, string) {
			out, err := h.Kubectl(ctx, "apiVersion: example.flotilla.dev/v1\nkind: Paint\nmetadata: {name: red}\nspec: {colour: red}\n", "apply", "-f", "-")
			return err == nil, out + fmt.Sprint(err)
		})
		if out := kubectlOut(t, h, "get", "paints.v2.example.flotilla.dev", "red", "-o", "jsonpath={.apiVersion} {.spec.color}"); out != "example.flotilla.dev/v2 red" {
			t.Errorf("v1 paint read as v2 = %q, want the webhook's conversion", out)
		}
		apply(t, h, "apiVersion: example.flotilla.dev/v2\nkind: Paint\nmetadata: {name: blue}\nspec: {color: blue}\n")
		if out := kubectlOut(t, h, "get", "paints.v1.example.flotilla.dev", "blue", "-o", "jsonpath={.spec.colour}"); out != "blue" {
			t.Errorf("v2 paint read as v1: spec.colour = %q, want blue", out)
		}
	})

	t.Run("a webhook that times out refuses the write with Fail and passes with Ignore", func(t *testing.T) {
		secret := func(name string) error {
			_, err := c.CoreV1().Secrets("guarded").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		}
		start := time.Now()
		err := secret("slow-fail")
		if err == nil || !strings.Contains(err.Error(), "slow.toolbox.flotilla.dev") {
			t.Fatalf("timeout with failurePolicy Fail: %v, want refused naming the webhook", err)
		}
		framework.Figure(t, "a timed-out webhook (timeoutSeconds 2) refused the write after %s", time.Since(start).Round(10*time.Millisecond))
		kubectlOut(t, h, "patch", "validatingwebhookconfiguration", "deny-labelled", "--type=json",
			"-p", `[{"op":"replace","path":"/webhooks/1/failurePolicy","value":"Ignore"}]`)
		waitFor(t, 30*time.Second, "slow webhook ignored", func() (bool, string) {
			err := secret(fmt.Sprintf("slow-ignore-%d", time.Now().UnixNano()))
			return err == nil, fmt.Sprint(err)
		})
	})

	t.Run("a webhook whose pod is down: Fail refuses, Ignore passes", func(t *testing.T) {
		kubectlOut(t, h, "scale", "deployment", "hook", "--replicas=0")
		waitFor(t, time.Minute, "hook down", func() (bool, string) {
			err := configMap(fmt.Sprintf("down-%d", time.Now().UnixNano()), nil)
			pods, _ := h.Kubectl(ctx, "", "get", "deployments,pods,endpointslices", "-o", "wide")
			return err != nil && strings.Contains(err.Error(), "failed calling webhook"), fmt.Sprint(err) + "\n" + pods
		})
		for _, i := range []int{0, 1} {
			kubectlOut(t, h, "patch", "validatingwebhookconfiguration", "deny-labelled", "--type=json",
				"-p", fmt.Sprintf(`[{"op":"replace","path":"/webhooks/%d/failurePolicy","value":"Ignore"}]`, i))
		}
		kubectlOut(t, h, "patch", "mutatingwebhookconfiguration", "annotate", "--type=json",
			"-p", `[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"}]`)
		waitFor(t, 30*time.Second, "writes pass with Ignore", func() (bool, string) {
			err := configMap(fmt.Sprintf("ignored-%d", time.Now().UnixNano()), map[string]string{"deny": "true"})
			return err == nil, fmt.Sprint(err)
		})
	})

	t.Run("an aggregated API served by a pod answers kubectl get --raw", func(t *testing.T) {
		apply(t, h, flavoursAPIService)
		waitFor(t, time.Minute, "flavours listed", func() (bool, string) {
			out, err := h.Kubectl(ctx, "", "get", "--raw", "/apis/flavours.example.flotilla.dev/v1/namespaces/default/flavours")
			return err == nil && strings.Contains(out, `"sweet"`), out
		})
		waitFor(t, time.Minute, "APIService Available", func() (bool, string) {
			out, _ := h.Kubectl(ctx, "", "get", "apiservice", "v1.flavours.example.flotilla.dev", "-o", "jsonpath={.status.conditions[?(@.type=='Available')].status}")
			return strings.TrimSpace(out) == "True", out
		})
	})

	t.Run("an unavailable APIService does not break kubectl get pods", func(t *testing.T) {
		waitFor(t, time.Minute, "nowhere unavailable", func() (bool, string) {
			out, _ := h.Kubectl(ctx, "", "get", "apiservice", "v1.nowhere.example.flotilla.dev", "--no-headers")
			return strings.Contains(out, "False"), out
		})
		out, err := h.Kubectl(ctx, "", "get", "pods", "-A")
		if err != nil || !strings.Contains(out, "flavours") {
			t.Errorf("kubectl get pods -A with an unavailable APIService: %v\n%s", err, out)
		}
		// kubectl get apiservices says which group is unavailable and why.
		out, _ = h.Kubectl(ctx, "", "get", "apiservices", "--no-headers")
		if !regexp.MustCompile(`(?m)^v1\.nowhere\.example\.flotilla\.dev\s+default/nowhere\s+False \(MissingEndpoints\)`).MatchString(out) {
			t.Errorf("kubectl get apiservices does not show nowhere as unavailable:\n%s", out)
		}
	})
}

func apply(t testing.TB, h *devsite.Host, yaml string) {
	t.Helper()
	if out, err := h.Kubectl(context.Background(), yaml, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}
