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
	r.commit(map[string]string{"rooted.yaml": privilegedDeployment})
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
