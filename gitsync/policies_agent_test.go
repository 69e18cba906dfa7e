package gitsync

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// privilegedDeployment runs a privileged container. Pod Security Admission only warns about a
// workload (it refuses its pods); the baseline policy set refuses the Deployment itself.
const privilegedDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: rooted
  namespace: default
spec:
  selector:
    matchLabels: {app: rooted}
  template:
    metadata:
      labels: {app: rooted}
    spec:
      containers:
      - name: c
        image: example/app:1
        securityContext: {privileged: true}
`

// privilegedPod is a bare privileged Pod: Pod Security admission (baseline, the site
// default) refuses it.
const privilegedPod = `apiVersion: v1
kind: Pod
metadata: {name: rooted-pod, namespace: default}
spec:
  containers:
  - name: c
    image: example/app:1
    securityContext: {privileged: true}
`

// warnUnownedConfigMaps is a policy of the repository itself: a ConfigMap without label
// team is admitted with a warning.
const warnUnownedConfigMaps = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: team-label}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: ConfigMaps name their owner in label team
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: team-label}
spec:
  policyName: team-label
  validationActions: [Warn]
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: default}
`

// TestPoliciesAgainstAgent: on an agent started with --policies baseline, a commit adding a
// privileged Deployment is not applied (the previous revision stays); the GitSource status,
// the plan against the site and the offline plan (Go API and the built binary, exit 1) give
// the same line, naming the library policy. A Warn policy of the repository itself is a
// warning of the offline plan and, once applied, an APIWarning event and the source's
// Warning condition.
func TestPoliciesAgainstAgent(t *testing.T) {
	r := newRepo(t)
	first := r.commit(map[string]string{
		"policy.yaml": warnUnownedConfigMaps,
		"cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: default}\ndata: {a: b}\n",
	})
	e := startWith(t, "", "--policies=baseline")
	ctx := context.Background()
	const warning = `ConfigMap default/settings: Validation failed for ValidatingAdmissionPolicy 'team-label' with binding 'team-label': ConfigMaps name their owner in label team`

	t.Log("the baseline set is installed with the API")
	if _, err := e.client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "flotilla-no-privileged", metav1.GetOptions{}); err != nil {
		t.Fatalf("library policy flotilla-no-privileged: %v", err)
	}

	t.Log("offline, the repository's Warn policy is a plan warning")
	off, err := PlanOffline(r.dir, "", Limits{}, "baseline")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(off.Warnings, warning) || off.Counts().Invalid != 0 {
		t.Errorf("offline plan of the first revision: warnings %q, %+v: want %q and nothing invalid", off.Warnings, off.Counts(), warning)
	}

	t.Log("the first revision is applied; its warning becomes an event and the Warning condition")
	e.createSource(map[string]any{"url": "file://" + r.dir, "interval": "1s"})
	e.waitFor("first revision applied", e.readyAt(first))
	e.waitFor("Warning condition listing the policy's warning", func() bool {
		w := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionWarning)
		return w != nil && w.Reason == ReasonAPIWarnings && strings.Contains(w.Message, warning)
	})
	e.waitFor("APIWarning event with the policy's warning", func() bool {
		return strings.Contains(e.eventReasons("apps")[EventAPIWarning], warning)
	})

	t.Log("a commit adding a privileged Deployment")
	r.commit(map[string]string{"rooted.yaml": privilegedDeployment, "pod.yaml": privilegedPod})
	const denial = `rooted.yaml: Deployment default/rooted: ValidatingAdmissionPolicy 'flotilla-no-privileged' with binding 'flotilla-no-privileged' denied request: privileged containers are not allowed`
	invalidLine := func(p *Plan) string {
		for _, it := range p.Items {
			if it.Kind == "Deployment" && it.Name == "rooted" && it.Action == PlanInvalid {
				return it.Reason
			}
		}
		return ""
	}
	site, err := (&Applier{Dynamic: e.cctx.Dynamic, Mapper: e.cctx.RESTMapper}).Plan(ctx, PlanOptions{RepoDir: r.dir, Source: "default/apps"})
	if err != nil {
		t.Fatal(err)
	}
	line := invalidLine(site)
	if !strings.HasPrefix(line, denial) {
		t.Fatalf("site plan: Deployment rooted %q, want invalid starting with %q", line, denial)
	}
	t.Logf("denied: %s", line)
	off, err = PlanOffline(r.dir, "", Limits{}, "baseline")
	if err != nil {
		t.Fatal(err)
	}
	if got := invalidLine(off); got != line {
		t.Errorf("offline plan: Deployment rooted %q, want the site's line %q", got, line)
	}
	podLine := func(p *Plan) string {
		for _, it := range p.Items {
			if it.Kind == "Pod" && it.Action == PlanInvalid {
				return it.Reason
			}
		}
		return ""
	}
	// Pod Security admission refuses the bare Pod before any policy sees it, on the site
	// and offline.
	if got, want := podLine(off), podLine(site); got != want || !strings.Contains(want, `violates PodSecurity "baseline:latest": privileged`) {
		t.Errorf("privileged Pod: offline %q, site %q: want the same Pod Security refusal", got, want)
	}
	if off, err := PlanOffline(r.dir, "", Limits{}, "none"); err != nil || invalidLine(off) != "" {
		t.Errorf("offline plan without the library set: %q, %v: want the Deployment valid", invalidLine(off), err)
	}

	for _, args := range [][]string{{"--policies", "baseline"}, {"--kubeconfig", e.a.Kubeconfig, "--source", "default/apps"}} {
		cmd := exec.Command(framework.FlotillaBin(t), append(append([]string{"plan", "--output", "json"}, args...), r.dir)...)
		out, err := cmd.Output()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("flotilla plan %v: %v, want exit status 1\n%s", args, err, out)
		}
		var bp Plan
		if err := json.Unmarshal(out, &bp); err != nil {
			t.Fatalf("flotilla plan %v json: %v\n%s", args, err, out)
		}
		if got := invalidLine(&bp); got != line {
			t.Errorf("flotilla plan %v: Deployment rooted %q, want %q", args, got, line)
		}
	}

	t.Log("the controller does not apply the revision and says why")
	e.waitFor("GitSource not Ready with the policy's line", func() bool {
		c := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, line)
	})
	if st := e.source().Status; st.LastAppliedRevision != "main@sha1:"+first {
		t.Errorf("lastAppliedRevision %s, want the first revision kept", st.LastAppliedRevision)
	}
	if _, err := e.client.AppsV1().Deployments("default").Get(ctx, "rooted", metav1.GetOptions{}); err == nil {
		t.Error("the denied Deployment exists")
	}
}

// criticalDeployment is a Deployment of namespace apps the restricted set admits on its own
// (label, local image, resources, 2 replicas), labelled critical: it also needs a
// PodDisruptionBudget selecting app=name.
func criticalDeployment(name string) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ` + name + `
  namespace: apps
  labels: {app.kubernetes.io/name: ` + name + `, policies.flotilla.dev/critical: "true"}
spec:
  replicas: 2
  selector:
    matchLabels: {app: ` + name + `}
  template:
    metadata:
      labels: {app: ` + name + `}
    spec:
      containers:
      - name: c
        image: flotilla.local/` + name + `:1
        resources:
          limits: {cpu: 10m, memory: 16Mi}
`
}

// hostIngress is Ingress ns/name routing host.
func hostIngress(ns, name, host string) string {
	return `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: ` + name + `, namespace: ` + ns + `}
spec:
  rules:
  - host: ` + host + `
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
`
}

// TestCrossObjectPoliciesAgainstAgent: under the restricted set, the policies that look across
// objects read the inventory the policy-inventory controller keeps. A commit whose Ingress
// takes a host another namespace routes, or whose critical Deployment no stored
// PodDisruptionBudget covers, is not applied and the GitSource names both policies; the
// budget committed first lets the Deployment through.
func TestCrossObjectPoliciesAgainstAgent(t *testing.T) {
	r := newRepo(t)
	namespaces := "apiVersion: v1\nkind: Namespace\nmetadata: {name: apps}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: team-b}\n"
	first := r.commit(map[string]string{
		"namespaces.yaml": namespaces,
		"shop.yaml":       hostIngress("apps", "shop", "shop.example.com"),
		"pdb.yaml":        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: api, namespace: apps}\nspec:\n  minAvailable: 1\n  selector: {matchLabels: {app: api}}\n",
	})
	e := startWith(t, "policyinventory", "--policies=restricted")
	ctx := context.Background()
	e.createSource(map[string]any{"url": "file://" + r.dir, "interval": "1s"})
	e.waitFor("first revision applied", e.readyAt(first))
	e.waitFor("the inventory has the Ingress host and the budget", func() bool {
		cm, err := e.client.CoreV1().ConfigMaps("kube-system").Get(ctx, "flotilla-policy-inventory", metav1.GetOptions{})
		return err == nil && cm.Data["ingress.shop.example.com"] == "apps/shop" && cm.Data["pdb.apps.api"] == "app in api"
	})

	t.Log("a commit taking shop.example.com from team-b, with a covered and an uncovered critical Deployment")
	r.commit(map[string]string{
		"team-b.yaml": hostIngress("team-b", "shop", "shop.example.com"),
		"api.yaml":    criticalDeployment("api"),
		"cache.yaml":  criticalDeployment("cache"),
	})
	const (
		taken     = `team-b.yaml: Ingress team-b/shop: ValidatingAdmissionPolicy 'flotilla-ingress-hosts-unique' with binding 'flotilla-ingress-hosts-unique' denied request: Ingress shop routes a host routed from another namespace: shop.example.com (Ingress apps/shop)`
		uncovered = `cache.yaml: Deployment apps/cache: ValidatingAdmissionPolicy 'flotilla-critical-pdb' with binding 'flotilla-critical-pdb' denied request: Deployment cache is labelled policies.flotilla.dev/critical=true and no PodDisruptionBudget of namespace apps selects its pods`
	)
	e.waitFor("GitSource not Ready, naming both policies", func() bool {
		c := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, taken) && strings.Contains(c.Message, uncovered)
	})
	if c := apimeta.FindStatusCondition(e.source().Status.Conditions, v1alpha1.ConditionReady); strings.Contains(c.Message, "Deployment apps/api:") {
		t.Errorf("the covered Deployment api is refused: %s", c.Message)
	}
	if _, err := e.client.AppsV1().Deployments("apps").Get(ctx, "api", metav1.GetOptions{}); err == nil {
		t.Error("the revision was applied in part: Deployment api exists")
	}

	t.Log("offline, the revision's own Ingresses and budgets are the inventory")
	off, err := PlanOffline(r.dir, "", Limits{}, "restricted")
	if err != nil {
		t.Fatal(err)
	}
	invalid := map[string]string{}
	for _, it := range off.Items {
		if it.Action == PlanInvalid {
			invalid[it.Namespace+"/"+it.Name] = it.Reason
		}
	}
	if !strings.HasPrefix(invalid["team-b/shop"], taken) || !strings.HasPrefix(invalid["apps/cache"], uncovered) || invalid["apps/api"] != "" {
		t.Errorf("offline plan: invalid %q, want team-b/shop and apps/cache as on the site, apps/api valid", invalid)
	}

	t.Log("with its own budget committed first, the critical Deployment is applied")
	r.commit(map[string]string{
		"team-b.yaml": "",
		"cache.yaml":  "",
		"pdb-cache.yaml": "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: cache, namespace: apps}\n" +
			"spec:\n  minAvailable: 1\n  selector: {matchLabels: {app: cache}}\n",
	})
	e.waitFor("the inventory has budget cache", func() bool {
		cm, err := e.client.CoreV1().ConfigMaps("kube-system").Get(ctx, "flotilla-policy-inventory", metav1.GetOptions{})
		return err == nil && cm.Data["pdb.apps.cache"] == "app in cache"
	})
	last := r.commit(map[string]string{"cache.yaml": criticalDeployment("cache")})
	e.waitFor("the last revision applied", e.readyAt(last))
	for _, name := range []string{"api", "cache"} {
		if _, err := e.client.AppsV1().Deployments("apps").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("Deployment %s: %v", name, err)
		}
	}
}
