package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// LimitRangerPluginName is the admission plugin's upstream name.
const LimitRangerPluginName = "LimitRanger"

// limitRangerAnnotation lists on a pod what the plugin set, as upstream.
const limitRangerAnnotation = "kubernetes.io/limit-ranger"

// limitRanger is the LimitRanger admission plugin, as upstream (plugin/pkg/admission/limitranger),
// with the LimitRanges of the object's namespace:
//
//   - a new pod's containers (and init containers) get the default limits and requests of the
//     Container items for the resources they do not name, listed in the annotation
//     kubernetes.io/limit-ranger;
//   - then each container is checked against the Container items' min, max and
//     maxLimitRequestRatio, the pod's requests and limits against the Pod items', and a
//     claim's storage request (on create and update) against the PersistentVolumeClaim items':
//     a pod or claim out of bounds is refused (403) with upstream's messages.
//
// Pod updates are not checked: the containers' resources cannot change by update. The
// LimitRanges are read from the API server's informer, so a LimitRange applies to the pods
// created once it has been seen there (within a moment of its creation).
type limitRanger struct {
	*admission.Handler
	lister corelisters.LimitRangeLister
}

var (
	_ admission.MutationInterface   = (*limitRanger)(nil)
	_ admission.ValidationInterface = (*limitRanger)(nil)
)

func newLimitRanger(f informers.SharedInformerFactory) *limitRanger {
	inf := f.Core().V1().LimitRanges()
	l := &limitRanger{Handler: admission.NewHandler(admission.Create, admission.Update), lister: inf.Lister()}
	l.SetReadyFunc(inf.Informer().HasSynced)
	return l
}

// target is the pod or claim the request carries when the plugin applies to it.
func (l *limitRanger) target(a admission.Attributes) (*corev1.Pod, *corev1.PersistentVolumeClaim, error) {
	if a.GetSubresource() != "" || a.GetNamespace() == "" {
		return nil, nil, nil
	}
	switch a.GetResource().GroupResource() {
	case corev1.Resource("pods"):
		if a.GetOperation() != admission.Create {
			return nil, nil, nil
		}
		pod, ok := a.GetObject().(*corev1.Pod)
		if !ok {
			return nil, nil, apierrors.NewBadRequest("resource was marked with kind Pod but was unable to be converted")
		}
		return pod, nil, nil
	case corev1.Resource("persistentvolumeclaims"):
		pvc, ok := a.GetObject().(*corev1.PersistentVolumeClaim)
		if !ok {
			return nil, nil, apierrors.NewBadRequest("resource was marked with kind PersistentVolumeClaim but was unable to be converted")
		}
		return nil, pvc, nil
	}
	return nil, nil, nil
}

// limitRanges are the LimitRanges of the request's namespace, once the informer has them all.
func (l *limitRanger) limitRanges(a admission.Attributes) ([]*corev1.LimitRange, error) {
	if !l.WaitForReady() {
		return nil, admission.NewForbidden(a, fmt.Errorf("not yet ready to handle request"))
	}
	items, err := l.lister.LimitRanges(a.GetNamespace()).List(labels.Everything())
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("list the LimitRanges of namespace %s: %w", a.GetNamespace(), err))
	}
	// The same order on every call: the first LimitRange (by name) to give a default wins.
	slices.SortFunc(items, func(a, b *corev1.LimitRange) int { return strings.Compare(a.Name, b.Name) })
	return items, nil
}

// Admit fills a new pod's missing requests and limits from the Container items' defaults.
func (l *limitRanger) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	pod, _, err := l.target(a)
	if pod == nil || err != nil {
		return err
	}
	lrs, err := l.limitRanges(a)
	if err != nil {
		return err
	}
	defaultPodResources(pod, lrs)
	return nil
}

// Validate refuses a pod or claim outside the bounds of the namespace's LimitRanges.
func (l *limitRanger) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	pod, pvc, err := l.target(a)
	if (pod == nil && pvc == nil) || err != nil {
		return err
	}
	lrs, err := l.limitRanges(a)
	if err != nil {
		return err
	}
	var errs []error
	for _, lr := range lrs {
		if pod != nil {
			errs = append(errs, validatePodLimits(pod, lr)...)
		} else {
			errs = append(errs, validateClaimLimits(pvc, lr)...)
		}
	}
	if len(errs) > 0 {
		return admission.NewForbidden(a, utilerrors.NewAggregate(errs))
	}
	return nil
}

// defaultPodResources sets the requests and limits that the Container items of lrs default
// and the containers do not name (the first LimitRange to default a resource wins), and
// records them in the pod's annotation.
func defaultPodResources(pod *corev1.Pod, lrs []*corev1.LimitRange) {
	defaults := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, lr := range lrs {
		for _, item := range lr.Spec.Limits {
			if item.Type != corev1.LimitTypeContainer {
				continue
			}
			for name, q := range item.DefaultRequest {
				if _, ok := defaults.Requests[name]; !ok {
					defaults.Requests[name] = q.DeepCopy()
				}
			}
			for name, q := range item.Default {
				if _, ok := defaults.Limits[name]; !ok {
					defaults.Limits[name] = q.DeepCopy()
				}
			}
		}
	}
	if len(defaults.Requests) == 0 && len(defaults.Limits) == 0 {
		return
	}
	var notes []string
	for i := range pod.Spec.Containers {
		notes = append(notes, mergeContainerResources(&pod.Spec.Containers[i], defaults, "container")...)
	}
	for i := range pod.Spec.InitContainers {
		notes = append(notes, mergeContainerResources(&pod.Spec.InitContainers[i], defaults, "init container")...)
	}
	if len(notes) == 0 {
		return
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[limitRangerAnnotation] = "LimitRanger plugin set: " + strings.Join(notes, "; ")
}

func mergeContainerResources(c *corev1.Container, defaults corev1.ResourceRequirements, what string) []string {
	fill := func(dst *corev1.ResourceList, src corev1.ResourceList) []string {
		var set []string
		for name, q := range src {
			if _, ok := (*dst)[name]; ok {
				continue
			}
			if *dst == nil {
				*dst = corev1.ResourceList{}
			}
			(*dst)[name] = q.DeepCopy()
			set = append(set, string(name))
		}
		slices.Sort(set)
		return set
	}
	var notes []string
	if set := fill(&c.Resources.Requests, defaults.Requests); len(set) > 0 {
		notes = append(notes, fmt.Sprintf("%s request for %s %s", strings.Join(set, ", "), what, c.Name))
	}
	if set := fill(&c.Resources.Limits, defaults.Limits); len(set) > 0 {
		notes = append(notes, fmt.Sprintf("%s limit for %s %s", strings.Join(set, ", "), what, c.Name))
	}
	return notes
}

// validatePodLimits checks each container against lr's Container items and the whole pod
// against its Pod items.
func validatePodLimits(pod *corev1.Pod, lr *corev1.LimitRange) []error {
	var errs []error
	check := func(kind string, item corev1.LimitRangeItem, requests, limits corev1.ResourceList) {
		for _, bound := range []struct {
			list  corev1.ResourceList
			check func(observed) error
		}{{item.Min, observed.min}, {item.Max, observed.max}, {item.MaxLimitRequestRatio, observed.ratio}} {
			for _, name := range sortedNames(bound.list) {
				if err := bound.check(observe(kind, name, bound.list[name], requests, limits)); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	for _, item := range lr.Spec.Limits {
		switch item.Type {
		case corev1.LimitTypeContainer:
			for _, c := range slices.Concat(pod.Spec.Containers, pod.Spec.InitContainers) {
				check(string(item.Type), item, c.Resources.Requests, c.Resources.Limits)
			}
		case corev1.LimitTypePod:
			opts := resourcehelper.PodResourcesOptions{}
			check(string(item.Type), item, resourcehelper.PodRequests(pod, opts), resourcehelper.PodLimits(pod, opts))
		}
	}
	return errs
}

// validateClaimLimits checks a claim's storage request against lr's PersistentVolumeClaim items.
func validateClaimLimits(pvc *corev1.PersistentVolumeClaim, lr *corev1.LimitRange) []error {
	var errs []error
	requests := pvc.Spec.Resources.Requests
	for _, item := range lr.Spec.Limits {
		if item.Type != corev1.LimitTypePersistentVolumeClaim {
			continue
		}
		for _, name := range sortedNames(item.Min) {
			if err := observe(string(item.Type), name, item.Min[name], requests, nil).min(); err != nil {
				errs = append(errs, err)
			}
		}
		for _, name := range sortedNames(item.Max) {
			if err := observe(string(item.Type), name, item.Max[name], requests, nil).maxRequest(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// atOnePrecision returns the three quantities at one precision: milli-units unless one of them
// would overflow, as upstream.
func atOnePrecision(request, limit, enforced apiresource.Quantity) (int64, int64, int64) {
	r, l, e := request.Value(), limit.Value(), enforced.Value()
	if r <= apiresource.MaxMilliValue && l <= apiresource.MaxMilliValue && e <= apiresource.MaxMilliValue {
		return request.MilliValue(), limit.MilliValue(), enforced.MilliValue()
	}
	return r, l, e
}

// observed is one resource of a container, pod or claim against one bound of a LimitRange
// item, the quantities compared at one precision.
type observed struct {
	kind, name     string
	enforced       apiresource.Quantity
	req, lim       apiresource.Quantity
	hasReq, hasLim bool
	r, l, e        int64
}

func observe(kind string, name corev1.ResourceName, enforced apiresource.Quantity, requests, limits corev1.ResourceList) observed {
	o := observed{kind: kind, name: string(name), enforced: enforced}
	o.req, o.hasReq = requests[name]
	o.lim, o.hasLim = limits[name]
	o.r, o.l, o.e = atOnePrecision(o.req, o.lim, enforced)
	return o
}

// bound is upstream's message for a minimum or maximum the object does not keep.
func (o observed) bound(which, why string) error {
	return fmt.Errorf("%s %s usage per %s is %s%s", which, o.name, o.kind, o.enforced.String(), why)
}

func (o observed) min() error {
	switch {
	case !o.hasReq:
		return o.bound("minimum", ".  No request is specified")
	case o.r < o.e:
		return o.bound("minimum", ", but request is "+o.req.String())
	case o.hasLim && o.l < o.e:
		return o.bound("minimum", ", but limit is "+o.lim.String())
	}
	return nil
}

func (o observed) max() error {
	switch {
	case !o.hasLim:
		return o.bound("maximum", ".  No limit is specified")
	case o.l > o.e:
		return o.bound("maximum", ", but limit is "+o.lim.String())
	case o.hasReq && o.r > o.e:
		return o.bound("maximum", ", but request is "+o.req.String())
	}
	return nil
}

// maxRequest is max for a claim, which has requests only.
func (o observed) maxRequest() error {
	if !o.hasReq {
		return o.bound("maximum", ".  No request is specified")
	}
	if o.r > o.e {
		return o.bound("maximum", ", but request is "+o.req.String())
	}
	return nil
}

func (o observed) ratio() error {
	enforced, r, l := o.enforced, o.r, o.l
	if !o.hasReq || r == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no request is specified or request is 0", o.name, o.kind, enforced.String())
	}
	if !o.hasLim || l == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no limit is specified or limit is 0", o.name, o.kind, enforced.String())
	}
	observed := float64(l) / float64(r)
	ratio, most := observed, float64(enforced.Value())
	if enforced.Value() <= apiresource.MaxMilliValue {
		ratio, most = observed*1000, float64(enforced.MilliValue())
	}
	if ratio > most {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but provided ratio is %f", o.name, o.kind, enforced.String(), observed)
	}
	return nil
}
