package validation

import (
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// A node heartbeat Lease as the node agent writes it.
const leaseYAML = `
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: edge-host-1
  namespace: kube-node-lease
spec:
  holderIdentity: edge-host-1
  leaseDurationSeconds: 40
  renewTime: "2026-11-29T14:51:00.000000Z"
`

func TestValidateLease(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*coordinationv1.Lease)
		want   []string
	}{
		{"node lease", func(*coordinationv1.Lease) {}, none()},
		{"coordinated", func(l *coordinationv1.Lease) {
			l.Spec.Strategy = ptr.To(coordinationv1.OldestEmulationVersion)
			l.Spec.PreferredHolder = ptr.To("edge-host-2")
		}, none()},
		{"zero duration", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](0) },
			errs(inv("spec.leaseDurationSeconds"))},
		{"negative transitions", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](-1) },
			errs(inv("spec.leaseTransitions"))},
		{"preferredHolder without strategy", func(l *coordinationv1.Lease) { l.Spec.PreferredHolder = ptr.To("x") },
			errs(forb("spec.preferredHolder"))},
		{"unknown strategy", func(l *coordinationv1.Lease) {
			l.Spec.Strategy = ptr.To[coordinationv1.CoordinatedLeaseStrategy]("Newest")
		},
			errs(nsup("spec.strategy"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := fixture[coordinationv1.Lease](t, leaseYAML, true)
			c.mutate(l)
			checkErrs(t, ValidateLease(l), c.want)
		})
	}
	old := fixture[coordinationv1.Lease](t, leaseYAML, true)
	upd := old.DeepCopy()
	upd.Spec.HolderIdentity = ptr.To("edge-host-2")
	upd.Spec.LeaseTransitions = ptr.To[int32](1)
	checkErrs(t, ValidateLeaseUpdate(upd, old), none())
}

// The PDB example of the Kubernetes documentation (minAvailable 2 over the Deployment's pods).
const pdbYAML = `
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: nginx-pdb
spec:
  minAvailable: 2
  selector:
    matchLabels:
      app: nginx
`

func TestValidatePodDisruptionBudget(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*policyv1.PodDisruptionBudget)
		want   []string
	}{
		{"minAvailable", func(*policyv1.PodDisruptionBudget) {}, none()},
		{"maxUnavailable percent, AlwaysAllow", func(p *policyv1.PodDisruptionBudget) {
			p.Spec.MinAvailable = nil
			p.Spec.MaxUnavailable = ptr.To(intstr.FromString("20%"))
			p.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.AlwaysAllow)
		}, none()},
		{"both", func(p *policyv1.PodDisruptionBudget) { p.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1)) },
			errs(inv("spec"))},
		{"neither", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = nil }, errs(req("spec.minAvailable"))},
		{"negative", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = ptr.To(intstr.FromInt32(-1)) },
			errs(inv("spec.minAvailable"))},
		{"over 100%", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = ptr.To(intstr.FromString("101%")) },
			errs(inv("spec.minAvailable"))},
		{"not a percentage", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = ptr.To(intstr.FromString("half")) },
			errs(inv("spec.minAvailable"))},
		{"selector", func(p *policyv1.PodDisruptionBudget) { p.Spec.Selector.MatchLabels = map[string]string{"app": "-x"} },
			errs(inv("spec.selector.matchLabels"))},
		{"eviction policy", func(p *policyv1.PodDisruptionBudget) {
			p.Spec.UnhealthyPodEvictionPolicy = ptr.To[policyv1.UnhealthyPodEvictionPolicyType]("Never")
		}, errs(nsup("spec.unhealthyPodEvictionPolicy"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := fixture[policyv1.PodDisruptionBudget](t, pdbYAML, true)
			c.mutate(p)
			checkErrs(t, ValidatePodDisruptionBudget(p), c.want)
		})
	}
	old := fixture[policyv1.PodDisruptionBudget](t, pdbYAML, true)
	upd := old.DeepCopy()
	upd.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: -1, CurrentHealthy: 3, DesiredHealthy: 2, ExpectedPods: 3}
	checkErrs(t, ValidatePodDisruptionBudgetStatusUpdate(upd, old), errs(inv("status.disruptionsAllowed")))
}

func testEvent() *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: "frontend.17a0c1", Namespace: "default", ResourceVersion: "1"},
		EventTime:           metav1.NewMicroTime(time.Date(2026, 11, 29, 14, 51, 0, 0, time.UTC)),
		ReportingController: "flotilla.dev/replicaset-controller",
		ReportingInstance:   "edge-host-1",
		Action:              "Create",
		Reason:              "SuccessfulCreate",
		Regarding:           corev1.ObjectReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "default", Name: "frontend"},
		Note:                "Created pod: frontend-b2zdv",
		Type:                corev1.EventTypeNormal,
	}
}

func TestValidateEventsV1Event(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*eventsv1.Event)
		want   []string
	}{
		{"replicaset SuccessfulCreate event", func(*eventsv1.Event) {}, none()},
		{"node event in default", func(e *eventsv1.Event) {
			e.Regarding = corev1.ObjectReference{Kind: "Node", Name: "edge-host-1"}
			e.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: e.EventTime}
		}, none()},
		{"no reportingController", func(e *eventsv1.Event) { e.ReportingController = "" }, errs(req("reportingController"))},
		{"no reportingInstance", func(e *eventsv1.Event) { e.ReportingInstance = "" }, errs(req("reportingInstance"))},
		{"no action", func(e *eventsv1.Event) { e.Action = "" }, errs(req("action"))},
		{"no reason", func(e *eventsv1.Event) { e.Reason = "" }, errs(req("reason"))},
		{"no eventTime", func(e *eventsv1.Event) { e.EventTime = metav1.MicroTime{} }, errs(req("eventTime"))},
		{"type", func(e *eventsv1.Event) { e.Type = "Error" }, errs(nsup("type"))},
		{"note over 1 KiB", func(e *eventsv1.Event) { e.Note = strings.Repeat("x", 1025) }, errs(long("note"))},
		{"regarding in another namespace", func(e *eventsv1.Event) { e.Regarding.Namespace = "shop" },
			errs(inv("regarding.namespace"))},
		{"cluster-scoped regarding in app namespace", func(e *eventsv1.Event) {
			e.Namespace = "shop"
			e.Regarding = corev1.ObjectReference{Kind: "Node", Name: "edge-host-1"}
		}, errs(inv("regarding.namespace"))},
		{"deprecated count", func(e *eventsv1.Event) { e.DeprecatedCount = 3 }, errs(forb("deprecatedCount"))},
		{"series count 1", func(e *eventsv1.Event) {
			e.Series = &eventsv1.EventSeries{Count: 1}
		}, errs(inv("series.count"), req("series.lastObservedTime"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := testEvent()
			c.mutate(e)
			checkErrs(t, ValidateEventsV1Event(e), c.want)
		})
	}
	old := testEvent()
	upd := old.DeepCopy()
	upd.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(old.EventTime.Add(time.Minute))}
	checkErrs(t, ValidateEventsV1EventUpdate(upd, old), none())
	upd.Note = "changed"
	checkErrs(t, ValidateEventsV1EventUpdate(upd, old), errs(inv("note")))
}

// A policy and binding in the shape of the built-in policy library (policies/), with the
// ValidatingAdmissionPolicy example of the upstream documentation.
const (
	vapYAML = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: demo-policy.example.com
spec:
  failurePolicy: Fail
  paramKind:
    apiVersion: rules.example.com/v1
    kind: ReplicaLimit
  matchConstraints:
    resourceRules:
    - apiGroups:   ["apps"]
      apiVersions: ["v1"]
      operations:  ["CREATE", "UPDATE"]
      resources:   ["deployments"]
  variables:
  - name: replicas
    expression: "object.spec.replicas"
  validations:
  - expression: "variables.replicas <= params.maxReplicas"
    messageExpression: "'replicas must be no greater than ' + string(params.maxReplicas)"
    reason: Invalid
  auditAnnotations:
  - key: high-replica-count
    valueExpression: "'Deployment spec.replicas set to ' + string(object.spec.replicas)"
`
	vapBindingYAML = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: demo-binding-test.example.com
spec:
  policyName: demo-policy.example.com
  validationActions: [Deny, Audit]
  paramRef:
    name: replica-limit-test.example.com
    namespace: default
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchLabels:
        environment: test
`
)

func TestValidateValidatingAdmissionPolicy(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*admissionregistrationv1.ValidatingAdmissionPolicy)
		want   []string
	}{
		{"documented example", func(*admissionregistrationv1.ValidatingAdmissionPolicy) {}, none()},
		{"audit annotations only", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Spec.Validations = nil }, none()},
		{"neither validations nor auditAnnotations", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations, p.Spec.AuditAnnotations = nil, nil
		}, errs(req("spec.validations"))},
		{"empty expression", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Spec.Validations[0].Expression = "  " },
			errs(req("spec.validations[0].expression"))},
		{"huge expression", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "true || " + strings.Repeat("true || ", 2000) + "true"
		}, errs(long("spec.validations[0].expression"))},
		{"message with newline", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Message = "too many\nreplicas"
		}, errs(inv("spec.validations[0].message"))},
		{"reason", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Reason = ptr.To[metav1.StatusReason]("Conflict")
		}, errs(nsup("spec.validations[0].reason"))},
		{"failurePolicy", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.FailurePolicy = ptr.To[admissionregistrationv1.FailurePolicyType]("Retry")
		}, errs(nsup("spec.failurePolicy"))},
		{"no matchConstraints", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Spec.MatchConstraints = nil },
			errs(req("spec.matchConstraints"))},
		{"bad operation", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{"PATCH"}
		}, errs(nsup("spec.matchConstraints.resourceRules[0].operations[0]"))},
		{"no operations", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].Operations = nil
		}, errs(req("spec.matchConstraints.resourceRules[0].operations"))},
		{"star with others", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].APIGroups = []string{"*", "apps"}
		}, errs(inv("spec.matchConstraints.resourceRules[0].apiGroups"))},
		{"paramKind without kind", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Spec.ParamKind.Kind = "" },
			errs(req("spec.paramKind.kind"))},
		{"paramKind bad apiVersion", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.ParamKind.APIVersion = "rules.example.com/v1/beta"
		}, errs(inv("spec.paramKind.apiVersion"))},
		{"duplicate audit key", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.AuditAnnotations = append(p.Spec.AuditAnnotations, p.Spec.AuditAnnotations[0])
		}, errs(dup("spec.auditAnnotations[1].key"))},
		{"variable name", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.Spec.Variables[0].Name = "max-replicas" },
			errs(inv("spec.variables[0].name"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := fixture[admissionregistrationv1.ValidatingAdmissionPolicy](t, vapYAML, false)
			c.mutate(p)
			checkErrs(t, ValidateValidatingAdmissionPolicy(p), c.want)
		})
	}
}

func TestValidateValidatingAdmissionPolicyBinding(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		want   []string
	}{
		{"documented example", func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {}, none()},
		{"no policyName", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) { b.Spec.PolicyName = "" },
			errs(req("spec.policyName"))},
		{"no actions", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) { b.Spec.ValidationActions = nil },
			errs(req("spec.validationActions"))},
		{"unknown action", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{"Block"}
		}, errs(nsup("spec.validationActions[0]"))},
		{"Deny and Warn", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny, admissionregistrationv1.Warn}
		}, errs(inv("spec.validationActions"))},
		{"duplicate action", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ValidationActions = append(b.Spec.ValidationActions, admissionregistrationv1.Audit)
		}, errs(dup("spec.validationActions[2]"))},
		{"paramRef name and selector", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ParamRef.Selector = &metav1.LabelSelector{}
		}, errs(forb("spec.paramRef.name"))},
		{"paramRef without notFound action", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ParamRef.ParameterNotFoundAction = nil
		}, errs(req("spec.paramRef.parameterNotFoundAction"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := fixture[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, vapBindingYAML, false)
			c.mutate(b)
			checkErrs(t, ValidateValidatingAdmissionPolicyBinding(b), c.want)
		})
	}
}
