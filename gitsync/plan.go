package gitsync

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/flotilla-dev/flotilla/policies"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// PlanAction is what gitsync would do with one object.
type PlanAction string

// Plan actions.
const (
	PlanCreate    PlanAction = "create"
	PlanUpdate    PlanAction = "update"
	PlanUnchanged PlanAction = "unchanged"
	PlanDelete    PlanAction = "delete"
	PlanKeep      PlanAction = "keep"
	PlanInvalid   PlanAction = "invalid"
	// PlanRendered is a valid object of an offline plan (not compared with a cluster).
	PlanRendered PlanAction = "rendered"
)

// PlanItem is one object of a plan.
type PlanItem struct {
	Action     PlanAction `json:"action"`
	File       string     `json:"file,omitempty"`
	APIVersion string     `json:"apiVersion,omitempty"`
	Kind       string     `json:"kind"`
	Namespace  string     `json:"namespace,omitempty"`
	Name       string     `json:"name"`
	// Changes are the fields that differ (update), or the fields git sets (create). The
	// values of a Secret's data and stringData read PlanRedacted (see DiffObjects), in every
	// format of the plan.
	Changes []FieldChange `json:"changes,omitempty"`
	// Reason says why an object is kept, or, for an invalid object, is gitsync's
	// failure line "file: Kind namespace/name: field: message".
	Reason string `json:"reason,omitempty"`
}

// Plan is what gitsync would do if the rendered tree were applied now.
type Plan struct {
	// Source is the GitSource ("namespace/name") the plan was made for.
	Source string `json:"source"`
	// Path is the directory rendered, relative to the repository root.
	Path string `json:"path"`
	// Offline plans render and validate every object as the API would (PlanOffline), but
	// nothing was compared with a cluster: valid objects are "rendered", not create or
	// update.
	Offline  bool       `json:"offline"`
	Items    []PlanItem `json:"items"`
	Warnings []string   `json:"warnings,omitempty"`
	// Scheduling is where flotilla's scheduler would place the pods of the workloads the
	// revision creates or updates, and which would stay Pending (online plans that change a
	// workload; see SchedulingReport).
	Scheduling *SchedulingReport `json:"scheduling,omitempty"`
	// RolledBack, when the GitSource is rolled back (spec.rollback), says which revision
	// and why, and what is applied instead.
	RolledBack string `json:"rolledBack,omitempty"`
}

// PlanCounts counts a plan's items per action.
type PlanCounts struct {
	Create, Update, Unchanged, Delete, Keep, Invalid, Rendered int
}

// Counts counts the items per action.
func (p *Plan) Counts() PlanCounts {
	var c PlanCounts
	for _, it := range p.Items {
		switch it.Action {
		case PlanCreate:
			c.Create++
		case PlanUpdate:
			c.Update++
		case PlanUnchanged:
			c.Unchanged++
		case PlanDelete:
			c.Delete++
		case PlanKeep:
			c.Keep++
		case PlanInvalid:
			c.Invalid++
		case PlanRendered:
			c.Rendered++
		}
	}
	return c
}

// HasChanges reports whether applying the plan would create, update or delete anything.
func (p *Plan) HasChanges() bool {
	c := p.Counts()
	return c.Create+c.Update+c.Delete > 0
}

// Pending is the number of the revision's pods that the scheduling simulation found would
// stay Pending (0 when it did not run).
func (p *Plan) Pending() int {
	if p.Scheduling == nil {
		return 0
	}
	return p.Scheduling.Pending
}

// ExitCode is the exit status of `flotilla plan`: 1 when an object is invalid (gitsync
// would apply nothing of the revision); with detailed, 1 as well when pods of the revision
// would stay Pending (see SchedulingReport), else 2 for a valid plan with changes and 0
// without, like terraform plan -detailed-exitcode; otherwise 0.
func (p *Plan) ExitCode(detailed bool) int {
	switch {
	case p.Counts().Invalid > 0:
		return 1
	case detailed && p.Pending() > 0:
		return 1
	case detailed && p.HasChanges():
		return 2
	default:
		return 0
	}
}

// PlanOptions says what to plan.
type PlanOptions struct {
	// RepoDir is the work tree of the repository (the pull request's checkout).
	RepoDir string
	// Path is the directory in the repository to render; empty: the GitSource's
	// spec.path (the repository root when the source does not exist).
	Path string
	// Source is the GitSource "namespace/name" whose inventory and label the plan uses.
	Source string
	// Limits bound the render as gitsync's (zero fields: the defaults).
	Limits Limits
}

// DefaultPlanSource is the agent's bootstrap GitSource.
const DefaultPlanSource = "kube-system/root"

// PlanOffline renders dir in the repository at root exactly as gitsync would and lists
// the objects, without a cluster, in apply order. Every object is checked as the API would
// check it, so that a revision the API refuses fails offline as it fails online: Prepare
// runs with the kinds flotilla serves (a kind neither served nor defined by a
// CustomResourceDefinition of the revision is invalid), the revision's
// CustomResourceDefinitions and the custom resources they define are checked by CRDCheck,
// and every other object by apiserver.ValidateOffline (strict decoding, defaulting, the
// API's validation). Invalid items name the field, in the words of the online plan. What
// depends on the site is not checked (see ValidateOffline). lim bounds the render as
// gitsync's (see Render).
//
// Admission policies are evaluated as the site's API evaluates them (see planPolicies): the
// ValidatingAdmissionPolicies, bindings and params of the revision, and those of the
// built-in set policySet (policies.SetNone, SetBaseline or SetRestricted: give the site's
// --policies) that the revision does not replace. An object a policy denies is invalid
// with the API's message, which names the policy; a Warn action is a plan warning.
func PlanOffline(root, dir string, lim Limits, policySet string) (*Plan, error) {
	ctx := context.Background()
	objs, err := Render(ctx, root, dir, lim)
	if err != nil {
		return nil, err
	}
	p := &Plan{Path: planCleanPath(dir), Offline: true, Items: []PlanItem{}}
	crds := NewCRDCheck(objs)
	// As the online plan, with the bootstrap source's label (the label is part of what
	// is validated).
	a := &Applier{Mapper: apiserver.OfflineRESTMapper()}
	objs, fails := a.Prepare(objs, strings.Replace(DefaultPlanSource, "/", ".", 1))
	for _, f := range fails {
		p.Items = append(p.Items, PlanItem{Action: PlanInvalid, Reason: f})
	}
	var valid []Object
	var validItems []int
	for _, o := range objs {
		it := planItem(PlanRendered, o)
		line := planCRDCheck(ctx, crds, o)
		if line == "" && !isCRD(o) && !crds.Defines(o.Obj.GroupVersionKind().GroupKind()) {
			line = planValidateOffline(o)
		}
		if line != "" {
			it.Action, it.Reason = PlanInvalid, line
		} else {
			valid, validItems = append(valid, o), append(validItems, len(p.Items))
		}
		p.Items = append(p.Items, it)
	}
	// Pod Security admission runs before the admission policies, as on the site: what it
	// refuses is not evaluated further.
	valid, validItems, warnings, err := planPodSecurity(ctx, p, valid, validItems)
	if err != nil {
		return nil, err
	}
	p.Warnings = appendDistinct(p.Warnings, warnings...)
	lines, warnings, err := planPolicies(ctx, valid, policySet)
	if err != nil {
		return nil, err
	}
	for i, line := range lines {
		if line != "" {
			it := &p.Items[validItems[i]]
			it.Action, it.Reason = PlanInvalid, line
		}
	}
	p.Warnings = appendDistinct(p.Warnings, warnings...)
	return p, nil
}

// planPodSecurity checks the valid objects (items validItems of p) with the API server's Pod
// Security admission, offline: the levels are those the revision's Namespaces label, else the
// site default (apiserver.DefaultPodSecurityLevel; flotilla agent --pod-security-default). An
// object it refuses becomes invalid with the API's message; it returns the others, their
// items, and the warnings.
func planPodSecurity(ctx context.Context, p *Plan, valid []Object, validItems []int) ([]Object, []int, []string, error) {
	all := make([]*unstructured.Unstructured, len(valid))
	for i, o := range valid {
		all[i] = o.Obj
	}
	psa, err := apiserver.NewPodSecurityOffline("", all)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pod security: %w", err)
	}
	var kept []Object
	var keptItems []int
	var warnings []string
	for i, o := range valid {
		ws, refused := psa.Check(ctx, o.Obj)
		warnings = appendDistinct(warnings, objectWarnings(o, ws)...)
		if refused != nil {
			it := &p.Items[validItems[i]]
			it.Action, it.Reason = PlanInvalid, describe(o)+": "+errorText(refused)
			continue
		}
		kept, keptItems = append(kept, o), append(keptItems, validItems[i])
	}
	return kept, keptItems, warnings, nil
}

// planPolicies evaluates the admission policies of the revision (objs, valid and prepared)
// and of the built-in set policySet on every object of objs, offline, with the API
// server's own ValidatingAdmissionPolicy plugin and CEL libraries (policies.Engine). An
// object of the revision replaces the set's object of the same kind, namespace and name, as
// applying the revision would replace it on the site. It returns, per object, gitsync's
// failure line for an object a policy denies ("" when admitted) and the warnings of Warn
// actions as "Kind namespace/name: warning".
func planPolicies(ctx context.Context, objs []Object, policySet string) ([]string, []string, error) {
	if policySet == "" {
		policySet = policies.SetNone
	}
	set, err := policies.Library(policySet)
	if err != nil {
		return nil, nil, fmt.Errorf("--policies: %w", err)
	}
	type key struct {
		gk       schema.GroupKind
		ns, name string
	}
	own := map[key]bool{}
	var pool []*unstructured.Unstructured
	for _, o := range objs {
		own[key{o.Obj.GroupVersionKind().GroupKind(), o.Obj.GetNamespace(), o.Obj.GetName()}] = true
		pool = append(pool, o.Obj)
	}
	for _, u := range set {
		if !own[key{u.GroupVersionKind().GroupKind(), u.GetNamespace(), u.GetName()}] {
			pool = append(pool, u)
		}
	}
	lines := make([]string, len(objs))
	if !slices.ContainsFunc(pool, isValidatingPolicy) {
		return lines, nil, nil
	}
	eng, err := policies.NewEngine(pool, apiserver.OfflineRESTMapper())
	if err != nil {
		return nil, nil, fmt.Errorf("admission policies: %w", err)
	}
	defer eng.Close()
	var warnings []string
	for i, o := range objs {
		res, err := eng.Evaluate(ctx, o.Obj)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: admission policies: %w", describe(o), err)
		}
		if res.Denied != nil {
			lines[i] = describe(o) + ": " + errorText(res.Denied)
		}
		warnings = appendDistinct(warnings, objectWarnings(o, res.Warnings)...)
	}
	return lines, warnings, nil
}

// isValidatingPolicy reports whether u is a ValidatingAdmissionPolicy.
func isValidatingPolicy(u *unstructured.Unstructured) bool {
	gvk := u.GroupVersionKind()
	return gvk.Group == "admissionregistration.k8s.io" && gvk.Kind == "ValidatingAdmissionPolicy"
}

// planValidateOffline is the failure line of an object of a kind flotilla serves, checked
// without a cluster by apiserver.ValidateOffline ("" when valid): "file: Kind
// namespace/name: field: message; ...", as Validate reports a failed dry-run.
func planValidateOffline(o Object) string {
	errs := apiserver.ValidateOffline(o.Obj)
	if len(errs) == 0 {
		return ""
	}
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, strings.TrimPrefix(e.Error(), "<nil>: "))
	}
	return describe(o) + ": " + strings.Join(msgs, "; ")
}

// planCRDCheck is gitsync's failure line for a CustomResourceDefinition of the revision, or
// for a custom resource it defines, from CRDCheck ("" when valid, or neither).
func planCRDCheck(ctx context.Context, crds *CRDCheck, o Object) string {
	switch {
	case isCRD(o):
		return crds.CheckCRD(o)
	case crds.Defines(o.Obj.GroupVersionKind().GroupKind()):
		return crds.Check(ctx, o)
	}
	return ""
}

// Plan renders opts.Path in opts.RepoDir as gitsync would, server-side dry-runs every object
// as gitsync's field manager with the source's label, and compares each result with the
// live object. A custom resource whose CustomResourceDefinition is in the revision is
// checked against that definition instead (as gitsync validates it), and is a create
// unless the server already has it. Inventory entries of the source that are no longer
// rendered are listed as delete, or keep with the reason when gitsync's prune protections
// apply. The server is not changed. A render failure is returned as an error; invalid
// objects are items. The warnings the API answers to an object's dry-run (see
// CollectWarnings), such as Pod Security Admission's for a workload whose pods it would
// refuse, are plan warnings "Kind namespace/name: warning", each once.
//
// When the plan creates, updates or deletes a workload (Deployment, ReplicaSet,
// StatefulSet, DaemonSet, Job, Pod), it also simulates where flotilla's scheduler would
// place the revision's pods (Plan.Scheduling, see simulateScheduling): on the site's Nodes
// and pods as listed now, with the pods of the workloads it replaces or deletes taken away.
// A site the plan's credential may not list is a warning "scheduling not simulated: ...",
// never a failure.
func (a *Applier) Plan(ctx context.Context, opts PlanOptions) (*Plan, error) {
	srcNS, srcName, err := planSplitSource(opts.Source)
	if err != nil {
		return nil, err
	}
	source := srcNS + "." + srcName
	p := &Plan{Source: srcNS + "/" + srcName, Items: []PlanItem{}}

	gs, err := a.getSource(ctx, srcNS, srcName)
	if err != nil {
		return nil, err
	}
	path := opts.Path
	if gs == nil {
		p.Warnings = append(p.Warnings, fmt.Sprintf("GitSource %s not found: nothing to prune, every object is compared as if it applied it", p.Source))
	} else if path == "" {
		path = gs.Spec.Path
	}
	if gs != nil && gs.Status.RolledBack != nil {
		p.RolledBack = rolledBackMessage(gs.Status.RolledBack)
	}
	p.Path = planCleanPath(path)

	objs, err := Render(ctx, opts.RepoDir, path, opts.Limits)
	if err != nil {
		return nil, err
	}
	// From every rendered object: a definition Prepare refuses still defines its kind.
	crds := NewCRDCheck(objs)
	objs, fails := a.Prepare(objs, source)
	for _, f := range fails {
		p.Items = append(p.Items, PlanItem{Action: PlanInvalid, Reason: f})
	}
	// What the scheduling simulation needs: the valid objects, and the workloads the plan
	// creates, updates or deletes.
	var valid []*unstructured.Unstructured
	var sched []schedulingChange
	for _, o := range objs {
		var it PlanItem
		var applied *unstructured.Unstructured
		if line := planCRDCheck(ctx, crds, o); line != "" {
			it = planItem(PlanInvalid, o)
			it.Reason = line
		} else {
			var warnings []string
			if crds.Defines(o.Obj.GroupVersionKind().GroupKind()) {
				it, warnings, err = a.planCustomResource(ctx, o, source)
			} else {
				it, applied, warnings, err = a.planDryRun(ctx, o, source)
			}
			p.Warnings = appendDistinct(p.Warnings, warnings...)
		}
		if err != nil {
			return nil, err
		}
		p.Items = append(p.Items, it)
		if it.Action != PlanInvalid {
			valid = append(valid, o.Obj)
		}
		if applied != nil && (it.Action == PlanCreate || it.Action == PlanUpdate) && isPlanWorkload(applied) {
			sched = append(sched, schedulingChange{Action: it.Action, Obj: applied,
				TemplateChanged: it.Action == PlanUpdate && planTemplateChanged(it.Kind, it.Changes)})
		}
	}

	if gs != nil && gs.Status.Inventory != nil {
		prune := gs.Spec.Prune == nil || *gs.Spec.Prune
		items, err := a.planPrune(ctx, Stale(gs.Status.Inventory.Entries, Inventory(objs)), source, prune)
		if err != nil {
			return nil, err
		}
		p.Items = append(p.Items, items...)
		for _, it := range items {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(it.APIVersion)
			u.SetKind(it.Kind)
			u.SetNamespace(it.Namespace)
			u.SetName(it.Name)
			if it.Action == PlanDelete && isPlanWorkload(u) {
				sched = append(sched, schedulingChange{Action: PlanDelete, Obj: u})
			}
		}
	}
	// Where the revision's pods would go: a listing the plan's credential may not be allowed
	// is a warning, never a failure of the plan.
	if len(sched) > 0 {
		rep, warnings, err := a.planScheduling(ctx, valid, sched)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			p.Warnings = append(p.Warnings, "scheduling not simulated: "+err.Error())
		default:
			p.Scheduling = rep
			p.Warnings = appendDistinct(p.Warnings, warnings...)
		}
	}
	// What needs a reviewer's attention first; apply order within each action.
	slices.SortStableFunc(p.Items, func(x, y PlanItem) int {
		return slices.Index(planActionOrder, x.Action) - slices.Index(planActionOrder, y.Action)
	})
	return p, nil
}

var planActionOrder = []PlanAction{PlanInvalid, PlanCreate, PlanUpdate, PlanDelete, PlanKeep, PlanUnchanged}

func planSplitSource(s string) (ns, name string, err error) {
	if s == "" {
		s = DefaultPlanSource
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("source %q: want NAMESPACE/NAME of a GitSource, like %s", s, DefaultPlanSource)
	}
	return ns, name, nil
}

func planCleanPath(p string) string {
	p = strings.Trim(strings.TrimPrefix(p, "./"), "/")
	if p == "" {
		return "."
	}
	return p
}

// getSource returns the GitSource, or nil when it does not exist.
func (a *Applier) getSource(ctx context.Context, ns, name string) (*v1alpha1.GitSource, error) {
	u, err := a.Dynamic.Resource(GitSourceResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get GitSource %s/%s: %w", ns, name, err)
	}
	var gs v1alpha1.GitSource
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gs); err != nil {
		return nil, fmt.Errorf("decode GitSource %s/%s: %w", ns, name, err)
	}
	return &gs, nil
}

func planItem(action PlanAction, o Object) PlanItem {
	return PlanItem{Action: action, File: o.File, APIVersion: o.Obj.GetAPIVersion(), Kind: o.Obj.GetKind(),
		Namespace: o.Obj.GetNamespace(), Name: o.Obj.GetName()}
}

// planObject dry-runs o exactly as Apply would patch it and compares the result with the
// live object; warnings are those the API answered to the dry-run of a valid object, as
// "Kind namespace/name: warning". Errors are returned only when the API could not be asked
// at all.
func (a *Applier) planObject(ctx context.Context, o Object, source string) (it PlanItem, warnings []string, err error) {
	it, _, warnings, err = a.planDryRun(ctx, o, source)
	return it, warnings, err
}

// planDryRun is planObject that also returns the object as the dry-run made it (defaulted,
// merged with the live object; in its own namespace), for a valid object: what the
// scheduling simulation builds a workload's pods from.
func (a *Applier) planDryRun(ctx context.Context, o Object, source string) (it PlanItem, applied *unstructured.Unstructured, warnings []string, err error) {
	it = planItem(PlanUnchanged, o)
	m, err := a.mapping(o.Obj.GroupVersionKind())
	if err != nil {
		return it, nil, nil, fmt.Errorf("%s: %w", describe(o), err)
	}
	nsRes := a.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"})
	ri := a.Dynamic.Resource(m.Resource)
	var res, liveRes dynamic.ResourceInterface = ri, ri
	sent := o.Obj
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := sent.GetNamespace()
		liveRes = ri.Namespace(ns)
		// As Validate does: a namespace this revision creates does not exist yet, so the
		// object is checked in "default" (and is certainly a create).
		if _, err := nsRes.Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			sent = sent.DeepCopy()
			sent.SetNamespace("default")
			ns = "default"
		} else if err != nil {
			return it, nil, nil, fmt.Errorf("%s: get namespace: %w", describe(o), err)
		}
		res = ri.Namespace(ns)
	}
	var live *unstructured.Unstructured
	if sent.GetNamespace() == o.Obj.GetNamespace() {
		live, err = liveRes.Get(ctx, o.Obj.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			live = nil
		} else if err != nil {
			return it, nil, nil, fmt.Errorf("%s: get: %w", describe(o), err)
		}
	}
	// Apply marks a Namespace it creates (or created before) as the source's.
	if o.Obj.GroupVersionKind().GroupKind() == (schema.GroupKind{Kind: "Namespace"}) &&
		(live == nil || live.GetAnnotations()[CreatedByAnnotation] == source) {
		sent = sent.DeepCopy()
		ann := sent.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[CreatedByAnnotation] = source
		sent.SetAnnotations(ann)
	}
	b, err := json.Marshal(sent.Object)
	if err != nil {
		return it, nil, nil, err
	}
	force := true
	wctx, collected := withWarnings(ctx)
	result, err := res.Patch(wctx, sent.GetName(), types.ApplyPatchType, b, metav1.PatchOptions{
		FieldManager: FieldManager, Force: &force, FieldValidation: "Strict", DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		if ctx.Err() != nil {
			return it, nil, nil, ctx.Err()
		}
		it.Action = PlanInvalid
		// gitsync's own failure line, so the plan reads like the status will.
		if lines := a.Validate(ctx, []Object{o}); len(lines) > 0 {
			it.Reason = lines[0]
		} else {
			it.Reason = describe(o) + ": " + err.Error()
		}
		return it, nil, nil, nil
	}
	warnings = objectWarnings(o, collected.list())
	result.SetNamespace(o.Obj.GetNamespace())
	if live == nil {
		it.Action = PlanCreate
		// What git sets, in the object's own namespace (not the one it was checked in).
		shown := sent.DeepCopy()
		shown.SetNamespace(o.Obj.GetNamespace())
		it.Changes = DiffObjects(nil, shown.Object)
		return it, result, warnings, nil
	}
	if it.Changes = DiffObjects(live.Object, result.Object); len(it.Changes) > 0 {
		it.Action = PlanUpdate
	}
	return it, result, warnings, nil
}

// planCustomResource plans a valid custom resource whose CustomResourceDefinition is in the
// revision. When the API does not serve its kind and version yet, or has no such object, it
// is a create (the server's definition may be absent or older than the revision's, so it
// is not dry-run). Otherwise it is planned as any object (with the API's warnings); should
// the server's definition refuse what the revision's accepts, it is an update whose changes
// cannot be shown before the definition is applied, and a warning says so.
func (a *Applier) planCustomResource(ctx context.Context, o Object, source string) (it PlanItem, warnings []string, err error) {
	gvk := o.Obj.GroupVersionKind()
	create := func() (PlanItem, []string, error) {
		it := planItem(PlanCreate, o)
		it.Changes = DiffObjects(nil, o.Obj.Object)
		return it, nil, nil
	}
	m, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return create()
	}
	if err != nil {
		return planItem(PlanUnchanged, o), nil, fmt.Errorf("%s: %w", describe(o), err)
	}
	var res dynamic.ResourceInterface = a.Dynamic.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		res = a.Dynamic.Resource(m.Resource).Namespace(o.Obj.GetNamespace())
	}
	if _, err := res.Get(ctx, o.Obj.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return create()
	} else if err != nil {
		return planItem(PlanUnchanged, o), nil, fmt.Errorf("%s: get: %w", describe(o), err)
	}
	it, warnings, err = a.planObject(ctx, o, source)
	if err != nil || it.Action != PlanInvalid {
		return it, warnings, err
	}
	reason := it.Reason
	it = planItem(PlanUpdate, o)
	return it, []string{fmt.Sprintf("%s: the CustomResourceDefinition on the server refuses it (%s), the revision's accepts it: its changes show once the revision's definition is applied",
		describe(o), strings.TrimPrefix(reason, describe(o)+": "))}, nil
}

// planPrune lists what Prune would do with the stale entries, without deleting.
func (a *Applier) planPrune(ctx context.Context, stale []v1alpha1.ResourceRef, source string, prune bool) ([]PlanItem, error) {
	var out []PlanItem
	for _, ref := range stale {
		ns, name, gvk, err := parseID(ref)
		if err != nil {
			return nil, err
		}
		it := PlanItem{Action: PlanDelete, APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: ns, Name: name}
		m, err := a.mapping(gvk)
		if err != nil {
			it.Action, it.Reason = PlanKeep, "kind "+gvk.String()+" is no longer served"
			out = append(out, it)
			continue
		}
		var res dynamic.ResourceInterface = a.Dynamic.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			res = a.Dynamic.Resource(m.Resource).Namespace(ns)
		}
		live, err := res.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // already gone: nothing will change
		}
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", ref.ID, err)
		}
		switch reason := PruneKeepReason(live, source); {
		case !prune:
			it.Action, it.Reason = PlanKeep, "spec.prune is false on the GitSource"
		case reason != "":
			it.Action, it.Reason = PlanKeep, reason
		}
		out = append(out, it)
	}
	return out, nil
}
