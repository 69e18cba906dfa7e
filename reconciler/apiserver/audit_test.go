package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// readAuditEvents reads the events of an audit log file.
func readAuditEvents(t *testing.T, path string) ([]auditv1.Event, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var events []auditv1.Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		events = append(events, ev)
	}
	return events, data
}

func findAuditEvent(events []auditv1.Event, verb, resource, name string) *auditv1.Event {
	for i, ev := range events {
		if ev.Verb == verb && ev.ObjectRef != nil && ev.ObjectRef.Resource == resource && ev.ObjectRef.Name == name &&
			ev.Stage == auditv1.StageResponseComplete {
			return &events[i]
		}
	}
	return nil
}

// TestAuditLogDefaultPolicy: with no policy file, every request is logged at Metadata once
// answered, with its user, verb and object, and no Secret value reaches the file.
func TestAuditLogDefaultPolicy(t *testing.T) {
	etcdURL, _ := startTestEtcd(t)
	logPath := filepath.Join(t.TempDir(), "audit", "audit.log")
	client, _ := startTestServer(t, etcdURL, func(c *Config) {
		c.Audit = AuditConfig{Path: logPath, MaxSizeMB: 50, MaxBackups: 3}
	})
	ctx := context.Background()
	const value = "hunter2-audit-canary-7f3a"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
		Data: map[string][]byte{"password": []byte(value)}, StringData: map[string]string{"token": value + "-string"}}
	if _, err := client.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets("default").Get(ctx, "db", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default"}, Data: map[string]string{"mode": "fast"}}
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Events are written as their request completes, possibly just after the answer.
	var events []auditv1.Event
	var data []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		events, data = readAuditEvents(t, logPath)
		if findAuditEvent(events, "create", "configmaps", "settings") != nil && findAuditEvent(events, "get", "secrets", "db") != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no events of the Secret and ConfigMap requests in %d events of %s", len(events), logPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []struct{ verb, resource, name string }{
		{"create", "secrets", "db"}, {"get", "secrets", "db"}, {"create", "configmaps", "settings"},
	} {
		ev := findAuditEvent(events, want.verb, want.resource, want.name)
		if ev == nil {
			t.Errorf("no %s %s/%s event", want.verb, want.resource, want.name)
			continue
		}
		if ev.Level != auditv1.LevelMetadata || ev.User.Username != testAdminUser || ev.ObjectRef.Namespace != "default" ||
			ev.ObjectRef.APIVersion != "v1" || ev.ResponseStatus == nil || ev.RequestObject != nil || ev.ResponseObject != nil {
			t.Errorf("%s %s event = %+v", want.verb, want.resource, ev)
		}
	}
	for _, ev := range events {
		if ev.Stage == auditv1.StageRequestReceived {
			t.Errorf("RequestReceived event %s %s: the default policy omits the stage", ev.Verb, ev.RequestURI)
			break
		}
	}
	for _, leak := range []string{value, base64.StdEncoding.EncodeToString([]byte(value)), base64.StdEncoding.EncodeToString([]byte(value + "-string"))} {
		if bytes.Contains(data, []byte(leak)) {
			t.Errorf("the audit log holds the Secret value %q", leak)
		}
	}
	if fi, err := os.Stat(logPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("audit log mode: %v %v", fi, err)
	}
}

// TestAuditLogPolicyFile: a policy file replaces the default, but a Secret is never logged
// above Metadata.
func TestAuditLogPolicyFile(t *testing.T) {
	etcdURL, _ := startTestEtcd(t)
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources: [{group: "", resources: [secrets]}]
- level: RequestResponse
  resources: [{group: "", resources: [configmaps]}]
- level: None
`), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit.log")
	client, _ := startTestServer(t, etcdURL, func(c *Config) {
		c.Audit = AuditConfig{Path: logPath, MaxSizeMB: 1, MaxBackups: 1, PolicyFile: policyFile}
	})
	ctx := context.Background()
	const value = "policy-file-canary-91c2"
	if _, err := client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default"},
		Data: map[string][]byte{"k": []byte(value)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"},
		Data: map[string]string{"k": "configmap-body-visible"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var events []auditv1.Event
	var data []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		events, data = readAuditEvents(t, logPath)
		if findAuditEvent(events, "create", "configmaps", "c") != nil && findAuditEvent(events, "create", "secrets", "s") != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no events of the Secret and ConfigMap requests in %d events", len(events))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ev := findAuditEvent(events, "create", "configmaps", "c"); ev.Level != auditv1.LevelRequestResponse || !strings.Contains(string(ev.RequestObject.Raw), "configmap-body-visible") {
		t.Errorf("ConfigMap event at %s: %s", ev.Level, ev.RequestObject.Raw)
	}
	if ev := findAuditEvent(events, "create", "secrets", "s"); ev.Level != auditv1.LevelMetadata {
		t.Errorf("Secret event at %s", ev.Level)
	}
	if bytes.Contains(data, []byte(base64.StdEncoding.EncodeToString([]byte(value)))) {
		t.Error("the audit log holds the Secret value")
	}
	for _, ev := range events {
		if ev.ObjectRef == nil || (ev.ObjectRef.Resource != "secrets" && ev.ObjectRef.Resource != "configmaps") {
			t.Errorf("event %s %s: the policy logs nothing else", ev.Verb, ev.RequestURI)
			break
		}
	}
}

func TestCheckAuditPolicySecrets(t *testing.T) {
	for _, tc := range []struct {
		name, rules string
		refused     string // a part of the error; "" accepts
	}{
		{"default", "- level: Metadata", ""},
		{"catch-all bodies", "- level: RequestResponse", "rule 1 (all resources)"},
		{"secrets explicitly", `- level: None
  nonResourceURLs: ["/healthz*"]
- level: Request
  resources: [{group: "", resources: [pods, secrets]}]`, `rule 2 (group "" resources pods,secrets)`},
		{"any group", `- level: RequestResponse
  resources: [{group: "*"}]`, "rule 1"},
		{"namespaces only", `- level: Request
  namespaces: [kube-system]`, "namespaces kube-system"},
		{"secrets taken first", `- level: Metadata
  resources: [{group: "", resources: [secrets, configmaps]}]
- level: RequestResponse`, ""},
		{"secrets ignored first", `- level: None
  resources: [{group: ""}]
- level: RequestResponse`, ""},
		{"earlier rule takes only some Secrets", `- level: Metadata
  verbs: [get]
  resources: [{group: "", resources: [secrets]}]
- level: Request
  resources: [{group: "", resources: ["*"]}]`, "rule 2"},
		{"earlier rule names some Secrets", `- level: None
  resources: [{group: "", resources: [secrets], resourceNames: [a]}]
- level: RequestResponse
  resources: [{group: "", resources: [secrets]}]`, "rule 2"},
		{"other groups", `- level: RequestResponse
  resources: [{group: apps}, {group: "", resources: [configmaps, "*/status"]}]
- level: Metadata`, ""},
		{"non-resource bodies", `- level: RequestResponse
  nonResourceURLs: ["*"]
- level: Metadata`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.LoadPolicyFromBytes([]byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n" + tc.rules + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			err = CheckAuditPolicySecrets(p)
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Errorf("error %v, want one with %q", err, tc.refused)
			}
		})
	}
}

// TestAuditRefusesSecretBodiesAtStart: New refuses a policy file that would log Secrets.
func TestAuditRefusesSecretBodiesAtStart(t *testing.T) {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: RequestResponse\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, gc := newTestGenericConfig()
	err := applyAudit(gc, AuditConfig{Path: filepath.Join(dir, "audit.log"), PolicyFile: policyFile})
	if err == nil || !strings.Contains(err.Error(), "--audit-policy-file") || !strings.Contains(err.Error(), "rule 1") {
		t.Fatalf("applyAudit = %v, want a refusal naming the file and rule 1", err)
	}
}

func TestSecretsAtMostMetadata(t *testing.T) {
	e := secretsAtMostMetadata{policy.NewFakePolicyRuleEvaluator(auditinternal.LevelRequestResponse, nil)}
	for _, tc := range []struct {
		attrs authorizer.AttributesRecord
		want  auditinternal.Level
	}{
		{authorizer.AttributesRecord{ResourceRequest: true, Resource: "secrets", Verb: "get"}, auditinternal.LevelMetadata},
		{authorizer.AttributesRecord{ResourceRequest: true, Resource: "secrets", Verb: "list", Namespace: "x"}, auditinternal.LevelMetadata},
		{authorizer.AttributesRecord{ResourceRequest: true, Resource: "configmaps", Verb: "get"}, auditinternal.LevelRequestResponse},
		{authorizer.AttributesRecord{ResourceRequest: true, APIGroup: "example.com", Resource: "secrets"}, auditinternal.LevelRequestResponse},
		{authorizer.AttributesRecord{Path: "/api/v1/secrets"}, auditinternal.LevelRequestResponse},
	} {
		if got := e.EvaluatePolicyRule(tc.attrs).Level; got != tc.want {
			t.Errorf("%+v: level %s, want %s", tc.attrs, got, tc.want)
		}
	}
	none := secretsAtMostMetadata{policy.NewFakePolicyRuleEvaluator(auditinternal.LevelNone, nil)}
	if got := none.EvaluatePolicyRule(authorizer.AttributesRecord{ResourceRequest: true, Resource: "secrets"}).Level; got != auditinternal.LevelNone {
		t.Errorf("None raised to %s", got)
	}
}

// TestDefaultAuditPolicyLeavesOutComponentReads: the default policy does not log what
// flotilla's components read (an idle site reads itself about once a second), but logs
// their writes and everything users do.
func TestDefaultAuditPolicyLeavesOutComponentReads(t *testing.T) {
	eval := policy.NewPolicyRuleEvaluator(DefaultAuditPolicy())
	res := func(u user.Info, verb, resource string) authorizer.Attributes {
		return authorizer.AttributesRecord{User: u, Verb: verb, Resource: resource, Namespace: "default", ResourceRequest: true, APIVersion: "v1"}
	}
	node := &user.DefaultInfo{Name: "system:node:host-1", Groups: []string{"system:nodes", user.AllAuthenticated}}
	scheduler := &user.DefaultInfo{Name: "system:kube-scheduler", Groups: []string{user.AllAuthenticated}}
	gitsync := &user.DefaultInfo{Name: "system:controller:gitsync", Groups: []string{user.AllAuthenticated}}
	loopback := &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
	sa := &user.DefaultInfo{Name: "system:serviceaccount:default:app", Groups: []string{"system:serviceaccounts", user.AllAuthenticated}}
	for _, tc := range []struct {
		name  string
		attrs authorizer.Attributes
		want  auditinternal.Level
	}{
		{"a host reads its Node", res(node, "get", "nodes"), auditinternal.LevelNone},
		{"a host updates its Lease", res(node, "update", "leases"), auditinternal.LevelMetadata},
		{"the scheduler lists pods", res(scheduler, "list", "pods"), auditinternal.LevelNone},
		{"the scheduler binds a pod", res(scheduler, "create", "pods"), auditinternal.LevelMetadata},
		{"gitsync reads a Lease", res(gitsync, "get", "leases"), auditinternal.LevelNone},
		{"gitsync patches a Deployment", res(gitsync, "patch", "deployments"), auditinternal.LevelMetadata},
		{"the API server reads a Service", res(loopback, "get", "services"), auditinternal.LevelNone},
		{"a user reads a Secret", res(alice, "get", "secrets"), auditinternal.LevelMetadata},
		{"a user lists pods", res(alice, "list", "pods"), auditinternal.LevelMetadata},
		{"a service account reads a ConfigMap", res(sa, "get", "configmaps"), auditinternal.LevelMetadata},
		{"a health check", authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/readyz"}, auditinternal.LevelNone},
		{"a user reads /openapi/v3", authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/openapi/v3"}, auditinternal.LevelMetadata},
	} {
		if got := eval.EvaluatePolicyRule(tc.attrs).Level; got != tc.want {
			t.Errorf("%s: level %s, want %s", tc.name, got, tc.want)
		}
	}
}
