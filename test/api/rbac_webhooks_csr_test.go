package api

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/test/framework"
)

const rbacManifests = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: secret-reader
rules:
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "watch", "list"]
- nonResourceURLs: ["/healthz"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: read-secrets-global
subjects:
- kind: Group
  name: manager
- kind: ServiceAccount
  name: prometheus
  namespace: monitoring
roleRef:
  kind: ClusterRole
  name: secret-reader
  apiGroup: rbac.authorization.k8s.io
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: pod-reader
  namespace: default
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "watch", "list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: read-pods
  namespace: default
subjects:
- kind: User
  name: jane
- kind: ServiceAccount
  name: default
  namespace: default
roleRef:
  kind: Role
  name: pod-reader
  apiGroup: rbac.authorization.k8s.io
`

// The webhook matches nothing that exists and is ignored on failure, so it cannot get in the
// way once the webhook admission plugin calls it.
const webhookManifest = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: widget-policy.example.com
webhooks:
- name: widget-policy.example.com
  rules:
  - apiGroups: ["example.com"]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["widgets"]
  clientConfig:
    service:
      namespace: default
      name: widget-webhook
      path: /validate
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Ignore
`

// testCSRPEM returns a fresh PEM certificate request, base64 encoded for spec.request.
func testCSRPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "jane", Organization: []string{"dev"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

func csrManifest(name, request, signer, usage string) string {
	return fmt.Sprintf(`apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: %s
spec:
  request: %s
  signerName: %s
  expirationSeconds: 86400
  usages: [%q]
  username: mallory
  groups: ["forged"]
`, name, request, signer, usage)
}

// checkTable asserts that out has one line per want, each starting with want's fields.
func checkTable(t *testing.T, what, out string, want [][]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Errorf("%s: %d lines, want %d:\n%s", what, len(lines), len(want), out)
		return
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); len(got) < len(w) || strings.Join(got[:len(w)], " ") != strings.Join(w, " ") {
			t.Errorf("%s line %d = %q, want prefix %q", what, i, lines[i], strings.Join(w, " "))
		}
	}
}

// TestRBACWebhooksAndCSRs drives rbac.authorization.k8s.io/v1, the admissionregistration.k8s.io/v1
// webhook configurations and certificates.k8s.io/v1 through kubectl: discovery, apply,
// defaulting, the printed tables, CSR requestor and approval, and 422s naming the field.
func TestRBACWebhooksAndCSRs(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})

	t.Run("discovery", func(t *testing.T) {
		out := a.MustKubectl("", "api-resources", "--api-group=rbac.authorization.k8s.io", "--no-headers")
		for _, want := range []string{`(?m)^clusterrolebindings\s+rbac.authorization.k8s.io/v1\s+false\s+ClusterRoleBinding$`,
			`(?m)^clusterroles\s+rbac.authorization.k8s.io/v1\s+false\s+ClusterRole$`,
			`(?m)^rolebindings\s+rbac.authorization.k8s.io/v1\s+true\s+RoleBinding$`,
			`(?m)^roles\s+rbac.authorization.k8s.io/v1\s+true\s+Role$`} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("api-resources rbac lacks %s:\n%s", want, out)
			}
		}
		out = a.MustKubectl("", "api-resources", "--api-group=certificates.k8s.io", "--no-headers")
		if !regexp.MustCompile(`(?m)^certificatesigningrequests\s+csr\s+certificates.k8s.io/v1\s+false\s+CertificateSigningRequest$`).MatchString(out) {
			t.Errorf("api-resources certificates:\n%s", out)
		}
		out = a.MustKubectl("", "api-resources", "--categories=api-extensions", "--no-headers", "-o", "name")
		for _, want := range []string{"validatingwebhookconfigurations.admissionregistration.k8s.io", "mutatingwebhookconfigurations.admissionregistration.k8s.io"} {
			if !strings.Contains(out, want) {
				t.Errorf("api-extensions category lacks %s:\n%s", want, out)
			}
		}
	})

	t.Run("rbac objects: apply, defaults, tables, roleRef immutable", func(t *testing.T) {
		a.MustKubectl(rbacManifests, "apply", "-f", "-")
		out := a.MustKubectl("", "get", "clusterrole", "secret-reader")
		checkTable(t, "get clusterrole", out, [][]string{{"NAME", "CREATED", "AT"}, {"secret-reader"}})
		if !regexp.MustCompile(`(?m)^secret-reader\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(out) {
			t.Errorf("CREATED AT is not RFC 3339:\n%s", out)
		}
		checkTable(t, "get role", a.MustKubectl("", "get", "role", "-n", "default"), [][]string{{"NAME", "CREATED", "AT"}, {"pod-reader"}})
		checkTable(t, "get rolebinding -o wide", a.MustKubectl("", "get", "rolebinding", "read-pods", "-n", "default", "-o", "wide"), [][]string{
			{"NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"},
			{"read-pods", "Role/pod-reader"}})
		out = a.MustKubectl("", "get", "clusterrolebinding", "read-secrets-global", "-o", "wide")
		if !regexp.MustCompile(`(?m)^read-secrets-global\s+ClusterRole/secret-reader\s+\S+\s+manager\s+monitoring/prometheus\s*$`).MatchString(out) {
			t.Errorf("get clusterrolebinding -o wide:\n%s", out)
		}
		if got := a.MustKubectl("", "get", "rolebinding", "read-pods", "-n", "default", "-o", "jsonpath={.subjects[0].apiGroup} {.subjects[1].apiGroup}"); got != "rbac.authorization.k8s.io " {
			t.Errorf("subject apiGroups = %q, want User defaulted to rbac.authorization.k8s.io and ServiceAccount empty", got)
		}
		_, errOut, err := a.Kubectl("", "patch", "rolebinding", "read-pods", "-n", "default", "--type=merge", "-p", `{"roleRef":{"name":"other"}}`)
		if err == nil || !strings.Contains(errOut, "is invalid") || !strings.Contains(errOut, "roleRef: Invalid value") || !strings.Contains(errOut, "cannot change roleRef") {
			t.Errorf("roleRef change: err %v\n%s", err, errOut)
		}
		// Subjects may change.
		a.MustKubectl("", "patch", "rolebinding", "read-pods", "-n", "default", "--type=json", "-p", `[{"op":"remove","path":"/subjects/1"}]`)
	})

	t.Run("validating webhook configuration: defaults and table", func(t *testing.T) {
		a.MustKubectl(webhookManifest, "apply", "-f", "-")
		checkTable(t, "get validatingwebhookconfigurations", a.MustKubectl("", "get", "validatingwebhookconfigurations"), [][]string{
			{"NAME", "WEBHOOKS", "AGE"}, {"widget-policy.example.com", "1"}})
		got := a.MustKubectl("", "get", "validatingwebhookconfiguration", "widget-policy.example.com", "-o",
			"jsonpath={.webhooks[0].matchPolicy} {.webhooks[0].timeoutSeconds} {.webhooks[0].clientConfig.service.port} {.webhooks[0].rules[0].scope} {.webhooks[0].namespaceSelector} {.webhooks[0].failurePolicy} {.metadata.generation}")
		if got != "Equivalent 10 443 * {} Ignore 1" {
			t.Errorf("defaults = %q", got)
		}
	})

	t.Run("csr: requestor from the user, table, field selector", func(t *testing.T) {
		a.MustKubectl(csrManifest("jane", testCSRPEM(t), "kubernetes.io/kube-apiserver-client", "client auth"), "create", "-f", "-")
		if got := a.MustKubectl("", "get", "csr", "jane", "-o", "jsonpath={.spec.username} {.spec.groups}"); !strings.HasPrefix(got, "admin ") || strings.Contains(got, "forged") {
			t.Errorf("requestor = %q, want the authenticated user admin and its groups", got)
		}
		checkTable(t, "get csr", a.MustKubectl("", "get", "csr"), [][]string{
			{"NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"}, {"jane"}})
		out := a.MustKubectl("", "get", "csr", "jane", "--no-headers")
		if !regexp.MustCompile(`^jane\s+\S+\s+kubernetes.io/kube-apiserver-client\s+admin\s+24h\s+Pending\s*$`).MatchString(strings.TrimSpace(out)) {
			t.Errorf("get csr jane:\n%s", out)
		}
		if out := a.MustKubectl("", "get", "csr", "--field-selector", "spec.signerName=example.com/other", "-o", "name"); out != "" {
			t.Errorf("field selector on another signer listed %q", out)
		}
		if out := a.MustKubectl("", "get", "csr", "--field-selector", "spec.signerName=kubernetes.io/kube-apiserver-client", "-o", "name"); strings.TrimSpace(out) != "certificatesigningrequest.certificates.k8s.io/jane" {
			t.Errorf("field selector on the signer listed %q", out)
		}
		// Server-side apply creates a request like create does.
		a.MustKubectl(csrManifest("ssa", testCSRPEM(t), "example.com/signer", "digital signature"), "apply", "--server-side", "-f", "-")
		if got := a.MustKubectl("", "get", "csr", "ssa", "-o", "jsonpath={.spec.signerName} {.spec.username}"); got != "example.com/signer admin" {
			t.Errorf("server-side applied CSR: %q", got)
		}
		// The main resource changes metadata only.
		_, errOut, err := a.Kubectl("", "patch", "csr", "jane", "--type=merge", "-p", `{"metadata":{"labels":{"a":"b"}},"spec":{"username":"mallory"}}`)
		if err != nil {
			t.Errorf("label patch: %v\n%s", err, errOut)
		}
		if got := a.MustKubectl("", "get", "csr", "jane", "-o", "jsonpath={.spec.username} {.metadata.labels.a}"); got != "admin b" {
			t.Errorf("after patch: %q, want the spec unchanged and the label set", got)
		}
	})

	t.Run("csr approval", func(t *testing.T) {
		if !strings.Contains(a.MustKubectl("", "get", "--raw", "/apis/certificates.k8s.io/v1"), `"certificatesigningrequests/approval"`) {
			t.Skip("certificatesigningrequests/approval is not installed: installAPIs does not mount extraSubresources yet")
		}
		out := a.MustKubectl("", "certificate", "approve", "jane")
		if !strings.Contains(out, "approved") {
			t.Errorf("kubectl certificate approve: %s", out)
		}
		out = a.MustKubectl("", "get", "csr", "jane", "--no-headers")
		if !regexp.MustCompile(`\sApproved\s*$`).MatchString(strings.TrimSpace(out)) {
			t.Errorf("after approve:\n%s", out)
		}
		a.MustKubectl(csrManifest("joe", testCSRPEM(t), "example.com/signer", "digital signature"), "create", "-f", "-")
		a.MustKubectl("", "certificate", "deny", "joe")
		if out := a.MustKubectl("", "get", "csr", "joe", "--no-headers"); !strings.Contains(out, "Denied") {
			t.Errorf("after deny:\n%s", out)
		}
		// Approved and Denied together are refused by the server (kubectl refuses it itself, so
		// PUT the approval directly).
		var csr map[string]any
		if err := json.Unmarshal([]byte(a.MustKubectl("", "get", "csr", "jane", "-o", "json")), &csr); err != nil {
			t.Fatal(err)
		}
		status := csr["status"].(map[string]any)
		status["conditions"] = append(status["conditions"].([]any), map[string]any{"type": "Denied", "status": "True", "reason": "Test"})
		body, _ := json.Marshal(csr)
		_, errOut, err := a.Kubectl(string(body), "replace", "--raw", "/apis/certificates.k8s.io/v1/certificatesigningrequests/jane/approval", "-f", "-")
		if err == nil || !strings.Contains(errOut, "Approved and Denied conditions are mutually exclusive") {
			t.Errorf("deny of an approved CSR: err %v\n%s", err, errOut)
		}
	})

	t.Run("invalid objects are refused with 422 naming the field", func(t *testing.T) {
		request := testCSRPEM(t)
		rb := func(subject, roleRef string) string {
			return "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: bad\n  namespace: default\nsubjects:\n" + subject + "roleRef:\n" + roleRef
		}
		vwc := func(webhook string) string {
			return "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: bad\nwebhooks:\n" + webhook
		}
		const hookOK = "  admissionReviewVersions: [v1]\n  sideEffects: None\n"
		cases := []struct{ name, manifest, field string }{
			{"role with nonResourceURLs", "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: bad\n  namespace: default\nrules:\n- nonResourceURLs: [/healthz]\n  verbs: [get]\n", "rules[0].nonResourceURLs"},
			{"clusterrole rule without verbs", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: bad\nrules:\n- apiGroups: [\"\"]\n  resources: [pods]\n", "rules[0].verbs"},
			{"clusterrole rule without resources", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: bad\nrules:\n- apiGroups: [\"\"]\n  verbs: [get]\n", "rules[0].resources"},
			{"rolebinding subject kind Robot", rb("- kind: Robot\n  name: r2\n", "  kind: Role\n  name: x\n  apiGroup: rbac.authorization.k8s.io\n"), "subjects[0].kind"},
			{"rolebinding roleRef kind Group", rb("- kind: User\n  name: jane\n", "  kind: Group\n  name: x\n  apiGroup: rbac.authorization.k8s.io\n"), "roleRef.kind"},
			{"rolebinding roleRef apiGroup", rb("- kind: User\n  name: jane\n", "  kind: Role\n  name: x\n  apiGroup: example.com\n"), "roleRef.apiGroup"},
			{"clusterrolebinding to a Role", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: bad\nroleRef:\n  kind: Role\n  name: x\n  apiGroup: rbac.authorization.k8s.io\n", "roleRef.kind"},
			{"clusterrolebinding serviceaccount without namespace", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: bad\nsubjects:\n- kind: ServiceAccount\n  name: sa\nroleRef:\n  kind: ClusterRole\n  name: x\n  apiGroup: rbac.authorization.k8s.io\n", "subjects[0].namespace"},
			{"webhook name with two segments", vwc("- name: example.com\n  clientConfig:\n    url: https://example.com/v\n" + hookOK), "webhooks[0].name"},
			{"webhook without sideEffects", vwc("- name: a.example.com\n  clientConfig:\n    url: https://example.com/v\n  admissionReviewVersions: [v1]\n"), "webhooks[0].sideEffects"},
			{"webhook sideEffects Some", vwc("- name: a.example.com\n  clientConfig:\n    url: https://example.com/v\n  admissionReviewVersions: [v1]\n  sideEffects: Some\n"), "webhooks[0].sideEffects"},
			{"webhook without admissionReviewVersions", vwc("- name: a.example.com\n  clientConfig:\n    url: https://example.com/v\n  sideEffects: None\n"), "webhooks[0].admissionReviewVersions"},
			{"webhook http url", vwc("- name: a.example.com\n  clientConfig:\n    url: http://example.com/v\n" + hookOK), "webhooks[0].clientConfig.url"},
			{"webhook url and service", vwc("- name: a.example.com\n  clientConfig:\n    url: https://example.com/v\n    service: {name: s, namespace: default}\n" + hookOK), "webhooks[0].clientConfig"},
			{"webhook service port 0", vwc("- name: a.example.com\n  clientConfig:\n    service: {name: s, namespace: default, port: 0}\n" + hookOK), "webhooks[0].clientConfig.service.port"},
			{"webhook timeout 31", vwc("- name: a.example.com\n  timeoutSeconds: 31\n  clientConfig:\n    url: https://example.com/v\n" + hookOK), "webhooks[0].timeoutSeconds"},
			{"webhook duplicate names", vwc("- name: a.example.com\n  clientConfig:\n    url: https://example.com/v\n" + hookOK + "- name: a.example.com\n  clientConfig:\n    url: https://example.com/w\n" + hookOK), "webhooks[1].name"},
			{"webhook rule operation PATCH", vwc("- name: a.example.com\n  rules:\n  - {apiGroups: [\"\"], apiVersions: [v1], operations: [PATCH], resources: [pods]}\n  clientConfig:\n    url: https://example.com/v\n" + hookOK), "webhooks[0].rules[0].operations[0]"},
			{"webhook match condition without expression", vwc("- name: a.example.com\n  matchConditions:\n  - name: c\n    expression: \" \"\n  clientConfig:\n    url: https://example.com/v\n" + hookOK), "webhooks[0].matchConditions[0].expression"},
			{"webhook match condition not a bool", vwc("- name: a.example.com\n  matchConditions:\n  - name: c\n    expression: \"'yes'\"\n  clientConfig:\n    url: https://example.com/v\n" + hookOK), "webhooks[0].matchConditions[0].expression"},
			{"mutating webhook unknown review version", "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: bad\nwebhooks:\n- name: a.example.com\n  clientConfig:\n    url: https://example.com/m\n  admissionReviewVersions: [v2]\n  sideEffects: None\n", "webhooks[0].admissionReviewVersions"},
			{"csr request not PEM", csrManifest("bad", base64.StdEncoding.EncodeToString([]byte("nope")), "example.com/signer", "client auth"), "spec.request"},
			{"csr without signerName", strings.Replace(csrManifest("bad", request, "x", "client auth"), "  signerName: x\n", "", 1), "spec.signerName"},
			{"csr signerName without path", csrManifest("bad", request, "example.com", "client auth"), "spec.signerName"},
			{"csr unknown usage", csrManifest("bad", request, "example.com/signer", "world domination"), "spec.usages[0]"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				out, errOut, err := a.Kubectl(tc.manifest, "create", "-f", "-")
				if err == nil {
					t.Fatalf("accepted, want 422 naming %s: %s", tc.field, out)
				}
				if !strings.Contains(errOut, "is invalid") || !strings.Contains(errOut, tc.field+":") {
					t.Errorf("error does not say invalid/%s:\n%s", tc.field, errOut)
				}
			})
		}
	})
}
