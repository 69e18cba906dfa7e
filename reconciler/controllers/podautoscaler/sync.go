package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// sync evaluates one HPA and schedules its next evaluation a sync period later. Failures are
// reported in the HPA's conditions and events and retried at the next period, not sooner.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	hpa, err := c.hpaLister.HorizontalPodAutoscalers(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.norm.forget(key)
		c.selMu.Lock()
		delete(c.selectors, key)
		c.selMu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	defer c.queue.AddAfter(key, c.cfg.SyncPeriod)
	if err := c.reconcile(ctx, key, hpa.DeepCopy()); err != nil {
		c.log.WithError(err).WithField("hpa", key).Debug("autoscale")
	}
	return nil
}

// reconcile evaluates an HPA (a copy of the cached one): it reads the target's scale,
// computes the desired replicas, rescales and writes the status.
func (c *Controller) reconcile(ctx context.Context, key string, hpa *autoscalingv2.HorizontalPodAutoscaler) error {
	now := c.now()
	original := hpa.Status.DeepCopy()
	ref := hpa.Spec.ScaleTargetRef
	reference := fmt.Sprintf("%s/%s/%s", ref.Kind, hpa.Namespace, ref.Name)

	sc, targetGR, err := c.getScale(ctx, hpa)
	if err != nil {
		c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedGetScale", err.Error())
		setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedGetScale",
			fmt.Sprintf("the HPA controller was unable to get the target's current scale: %v", err), now)
		if uerr := c.updateStatusIfNeeded(ctx, original, hpa); uerr != nil {
			return uerr
		}
		return fmt.Errorf("failed to query scale subresource for %s: %w", reference, err)
	}
	setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededGetScale",
		"the HPA controller was able to get the target's current scale", now)
	currentReplicas := sc.Spec.Replicas
	c.norm.recordInitialRecommendation(key, currentReplicas, now)

	minReplicas := ptr.Deref(hpa.Spec.MinReplicas, 1)
	var (
		statuses      []autoscalingv2.MetricStatus
		desired       int32
		rescaleReason string
		metricErr     error
	)
	rescale := true
	switch {
	case currentReplicas == 0 && minReplicas != 0:
		// Scaled to zero by hand: autoscaling is off until someone scales it up.
		desired, rescale = 0, false
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "ScalingDisabled",
			"scaling is disabled since the replica count of the target is zero", now)
	case currentReplicas > hpa.Spec.MaxReplicas:
		rescaleReason, desired = "Current number of replicas above Spec.MaxReplicas", hpa.Spec.MaxReplicas
	case currentReplicas < minReplicas:
		rescaleReason, desired = "Current number of replicas below Spec.MinReplicas", minReplicas
	default:
		var metricName string
		desired, metricName, statuses, metricErr = c.computeReplicasForMetrics(ctx, hpa, sc, now)
		if metricErr != nil && desired == -1 {
			// No metric gives a proposal: keep the scale, report.
			setStatus(hpa, currentReplicas, hpa.Status.DesiredReplicas, statuses, false, now)
			if err := c.updateStatusIfNeeded(ctx, original, hpa); err != nil {
				return err
			}
			c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedComputeMetricsReplicas", metricErr.Error())
			return fmt.Errorf("failed to compute desired number of replicas based on listed metrics for %s: %w", reference, metricErr)
		}
		if desired > currentReplicas {
			rescaleReason = fmt.Sprintf("%s above target", metricName)
		}
		if desired < currentReplicas {
			rescaleReason = "All metrics below target"
		}
		var out limitOutcome
		desired, out = c.norm.normalize(key, hpa.Spec.Behavior, currentReplicas, desired, minReplicas, hpa.Spec.MaxReplicas, now)
		if out.stabilized {
			setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, out.stabilizedReason, out.stabilizedMessage, now)
		} else {
			setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "ReadyForNewScale", "recommended size matches current size", now)
		}
		limited := corev1.ConditionFalse
		if out.limited {
			limited = corev1.ConditionTrue
		}
		setCondition(hpa, autoscalingv2.ScalingLimited, limited, out.limitReason, out.limitMessage, now)
		rescale = desired != currentReplicas
	}

	if rescale {
		sc.Spec.Replicas = desired
		if _, err := c.scales.Scales(hpa.Namespace).Update(ctx, targetGR, sc, metav1.UpdateOptions{}); err != nil {
			c.recorder.Eventf(hpa, corev1.EventTypeWarning, "FailedRescale", "New size: %d; reason: %s; error: %v", desired, rescaleReason, err)
			setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedUpdateScale",
				fmt.Sprintf("the HPA controller was unable to update the target scale: %v", err), now)
			setStatus(hpa, currentReplicas, hpa.Status.DesiredReplicas, statuses, false, now)
			if uerr := c.updateStatusIfNeeded(ctx, original, hpa); uerr != nil {
				return uerr
			}
			return fmt.Errorf("failed to rescale %s: %w", reference, err)
		}
		setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededRescale",
			fmt.Sprintf("the HPA controller was able to update the target scale to %d", desired), now)
		c.recorder.Eventf(hpa, corev1.EventTypeNormal, "SuccessfulRescale", "New size: %d; reason: %s", desired, rescaleReason)
		c.norm.storeScaleEvent(key, hpa.Spec.Behavior, currentReplicas, desired, now)
		c.log.WithFields(map[string]any{"hpa": key, "target": reference, "from": currentReplicas, "to": desired, "reason": rescaleReason}).Info("rescaled")
	} else {
		desired = currentReplicas
	}
	setStatus(hpa, currentReplicas, desired, statuses, rescale, now)
	if err := c.updateStatusIfNeeded(ctx, original, hpa); err != nil {
		return err
	}
	return metricErr
}

// getScale reads the /scale subresource of the HPA's target, trying each resource its kind
// maps to.
func (c *Controller) getScale(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler) (*autoscalingv1.Scale, schema.GroupResource, error) {
	ref := hpa.Spec.ScaleTargetRef
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, schema.GroupResource{}, fmt.Errorf("invalid API version in scale target reference: %w", err)
	}
	mappings, err := c.mapper.RESTMappings(schema.GroupKind{Group: gv.Group, Kind: ref.Kind})
	if err != nil {
		// The kind may be new: look again next time.
		if r, ok := c.mapper.(meta.ResettableRESTMapper); ok {
			r.Reset()
		}
		return nil, schema.GroupResource{}, fmt.Errorf("unable to determine resource for scale target reference: %w", err)
	}
	var firstErr error
	for i, m := range mappings {
		gr := m.Resource.GroupResource()
		sc, err := c.scales.Scales(hpa.Namespace).Get(ctx, gr, ref.Name, metav1.GetOptions{})
		if err == nil {
			return sc, gr, nil
		}
		if i == 0 {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = errors.New("unrecognized resource")
	}
	return nil, schema.GroupResource{}, firstErr
}

// computeReplicasForMetrics proposes a replica count for each metric and returns the largest,
// the metric it came from and the metrics' statuses (in the order of the spec). It returns -1
// when every metric failed, or when some failed and the others would scale down; otherwise an
// error says which metrics failed while the others still count.
func (c *Controller) computeReplicasForMetrics(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, sc *autoscalingv1.Scale, now time.Time) (int32, string, []autoscalingv2.MetricStatus, error) {
	selector, err := c.validateAndParseSelector(hpa, sc.Status.Selector, now)
	if err != nil {
		return -1, "", nil, err
	}
	specs := hpa.Spec.Metrics
	if len(specs) == 0 {
		specs = defaultMetrics()
	}
	specReplicas := sc.Spec.Replicas
	statuses := make([]autoscalingv2.MetricStatus, len(specs))
	var (
		replicas     int32
		metric       string
		invalid      int
		firstErr     error
		invalidState autoscalingv2.HorizontalPodAutoscalerCondition
	)
	for i := range specs {
		proposal, name, cond, err := c.computeReplicasForMetric(ctx, hpa, specs[i], specReplicas, selector, &statuses[i], now)
		if err != nil {
			if invalid == 0 {
				firstErr, invalidState = err, cond
			}
			invalid++
			continue
		}
		if replicas == 0 || proposal > replicas {
			replicas, metric = proposal, name
		}
	}
	if firstErr != nil {
		firstErr = fmt.Errorf("invalid metrics (%d invalid out of %d), first error is: %w", invalid, len(specs), firstErr)
	}
	if invalid >= len(specs) || (invalid > 0 && replicas < specReplicas) {
		setCondition(hpa, invalidState.Type, invalidState.Status, invalidState.Reason, invalidState.Message, now)
		return -1, "", statuses, firstErr
	}
	setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound",
		fmt.Sprintf("the HPA was able to successfully calculate a replica count from %s", metric), now)
	return replicas, metric, statuses, firstErr
}

// computeReplicasForMetric proposes a replica count for one metric and fills in its status;
// on failure it returns the ScalingActive condition to report.
func (c *Controller) computeReplicasForMetric(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, spec autoscalingv2.MetricSpec,
	specReplicas int32, selector labels.Selector, status *autoscalingv2.MetricStatus, now time.Time) (int32, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	tol := hpaTolerances(hpa.Spec.Behavior, c.cfg.Tolerance)
	fail := func(reason string, err error) (int32, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
		c.recorder.Event(hpa, corev1.EventTypeWarning, reason, err.Error())
		return 0, "", autoscalingv2.HorizontalPodAutoscalerCondition{
			Type: autoscalingv2.ScalingActive, Status: corev1.ConditionFalse, Reason: reason,
			Message: fmt.Sprintf("the HPA was unable to compute the replica count: %v", err),
		}, err
	}
	switch spec.Type {
	case autoscalingv2.ResourceMetricSourceType:
		if spec.Resource == nil {
			return fail("FailedGetResourceMetric", errors.New("resource metric without a resource source"))
		}
		replicas, current, name, err := c.resourceProposal(ctx, hpa.Namespace, specReplicas, spec.Resource.Name, "", spec.Resource.Target, selector, tol, now)
		if err != nil {
			return fail("FailedGetResourceMetric", fmt.Errorf("failed to get %s resource metric value: %w", spec.Resource.Name, err))
		}
		*status = autoscalingv2.MetricStatus{Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricStatus{Name: spec.Resource.Name, Current: current}}
		return replicas, name, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	case autoscalingv2.ContainerResourceMetricSourceType:
		src := spec.ContainerResource
		if src == nil {
			return fail("FailedGetContainerResourceMetric", errors.New("container resource metric without a container resource source"))
		}
		replicas, current, name, err := c.resourceProposal(ctx, hpa.Namespace, specReplicas, src.Name, src.Container, src.Target, selector, tol, now)
		if err != nil {
			return fail("FailedGetContainerResourceMetric", fmt.Errorf("failed to get %s container metric value: %w", src.Name, err))
		}
		*status = autoscalingv2.MetricStatus{Type: autoscalingv2.ContainerResourceMetricSourceType,
			ContainerResource: &autoscalingv2.ContainerResourceMetricStatus{Name: src.Name, Container: src.Container, Current: current}}
		return replicas, name, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	case autoscalingv2.PodsMetricSourceType:
		return fail("FailedGetPodsMetric", errors.New("pods metrics need the custom metrics API, which is not served"))
	case autoscalingv2.ObjectMetricSourceType:
		return fail("FailedGetObjectMetric", errors.New("object metrics need the custom metrics API, which is not served"))
	case autoscalingv2.ExternalMetricSourceType:
		return fail("FailedGetExternalMetric", errors.New("external metrics need the external metrics API, which is not served"))
	}
	return fail("InvalidMetricSourceType", fmt.Errorf("unknown metric source type %q", spec.Type))
}

// resourceProposal proposes a replica count for a resource metric target and returns the
// current value and a description of the metric.
func (c *Controller) resourceProposal(ctx context.Context, namespace string, specReplicas int32, res corev1.ResourceName, container string,
	target autoscalingv2.MetricTarget, selector labels.Selector, tol tolerances, now time.Time) (int32, autoscalingv2.MetricValueStatus, string, error) {
	var none autoscalingv2.MetricValueStatus
	what := "utilization"
	if target.AverageValue != nil {
		what = "usage"
	} else if target.AverageUtilization == nil {
		return 0, none, "", errors.New("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set")
	}
	metrics, pods, err := c.podsAndMetrics(ctx, namespace, res, selector, container)
	if err != nil {
		return 0, none, "", fmt.Errorf("failed to get %s %s: %w", res, what, err)
	}
	if target.AverageValue != nil {
		targetUsage := target.AverageValue.MilliValue()
		if targetUsage <= 0 {
			return 0, none, "", fmt.Errorf("invalid resource metric source: the average value target %s is not positive", target.AverageValue.String())
		}
		replicas, usage, err := c.calc.rawResourceReplicas(now, specReplicas, targetUsage, res, tol, metrics, pods)
		if err != nil {
			return 0, none, "", fmt.Errorf("failed to get %s usage: %w", res, err)
		}
		return replicas, autoscalingv2.MetricValueStatus{AverageValue: apiresource.NewMilliQuantity(usage, apiresource.DecimalSI)},
			fmt.Sprintf("%s resource", res), nil
	}
	if *target.AverageUtilization <= 0 {
		return 0, none, "", fmt.Errorf("invalid resource metric source: the utilization target %d is not positive", *target.AverageUtilization)
	}
	replicas, utilization, raw, err := c.calc.resourceReplicas(now, specReplicas, *target.AverageUtilization, res, container, tol, metrics, pods)
	if err != nil {
		return 0, none, "", fmt.Errorf("failed to get %s utilization: %w", res, err)
	}
	name := fmt.Sprintf("%s resource utilization (percentage of request)", res)
	if container != "" {
		name = fmt.Sprintf("%s container resource utilization (percentage of request)", res)
	}
	return replicas, autoscalingv2.MetricValueStatus{AverageUtilization: &utilization, AverageValue: apiresource.NewMilliQuantity(raw, apiresource.DecimalSI)}, name, nil
}

// podsAndMetrics reads the usage of the selected pods and lists them.
func (c *Controller) podsAndMetrics(ctx context.Context, namespace string, res corev1.ResourceName, selector labels.Selector, container string) (podMetrics, []*corev1.Pod, error) {
	metrics, _, err := c.metrics.resourceMetric(ctx, res, namespace, selector, container)
	if err != nil {
		return nil, nil, fmt.Errorf("unable to get metrics for resource %s: %w", res, err)
	}
	pods, err := c.podLister.Pods(namespace).List(selector)
	if err != nil {
		return nil, nil, fmt.Errorf("unable to get pods while calculating replica count: %w", err)
	}
	return metrics, pods, nil
}

// validateAndParseSelector parses the pod selector of the target's scale and makes sure no
// other HPA scales the same pods.
func (c *Controller) validateAndParseSelector(hpa *autoscalingv2.HorizontalPodAutoscaler, selector string, now time.Time) (labels.Selector, error) {
	if selector == "" {
		msg := "selector is required"
		c.recorder.Event(hpa, corev1.EventTypeWarning, "SelectorRequired", msg)
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", "the HPA target's scale is missing a selector", now)
		return nil, errors.New(msg)
	}
	parsed, err := labels.Parse(selector)
	if err != nil {
		msg := fmt.Sprintf("couldn't convert selector into a corresponding internal selector object: %v", err)
		c.recorder.Event(hpa, corev1.EventTypeWarning, "InvalidSelector", msg)
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", msg, now)
		return nil, errors.New(msg)
	}
	key := hpa.Namespace + "/" + hpa.Name
	c.selMu.Lock()
	c.selectors[key] = parsed
	same := map[string]labels.Selector{}
	for k, s := range c.selectors {
		if ns, _, _ := cache.SplitMetaNamespaceKey(k); ns == hpa.Namespace {
			same[k] = s
		}
	}
	c.selMu.Unlock()
	pods, err := c.podLister.Pods(hpa.Namespace).List(parsed)
	if err != nil {
		return nil, err
	}
	controlling := sets.New[string]()
	for _, pod := range pods {
		for k, s := range same {
			if s.Matches(labels.Set(pod.Labels)) {
				controlling.Insert(k)
			}
		}
	}
	if controlling.Len() > 1 {
		msg := fmt.Sprintf("pods by selector %v are controlled by multiple HPAs: %v", selector, sets.List(controlling))
		c.recorder.Event(hpa, corev1.EventTypeWarning, "AmbiguousSelector", msg)
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "AmbiguousSelector", msg, now)
		return nil, errors.New(msg)
	}
	return parsed, nil
}

// setStatus sets the HPA's status, keeping its conditions and, unless it rescaled now, its
// lastScaleTime.
func setStatus(hpa *autoscalingv2.HorizontalPodAutoscaler, currentReplicas, desiredReplicas int32, statuses []autoscalingv2.MetricStatus, rescaled bool, now time.Time) {
	hpa.Status = autoscalingv2.HorizontalPodAutoscalerStatus{
		ObservedGeneration: ptr.To(hpa.Generation),
		CurrentReplicas:    currentReplicas,
		DesiredReplicas:    desiredReplicas,
		LastScaleTime:      hpa.Status.LastScaleTime,
		CurrentMetrics:     statuses,
		Conditions:         hpa.Status.Conditions,
	}
	if rescaled {
		t := metav1.NewTime(now)
		hpa.Status.LastScaleTime = &t
	}
}

// setCondition sets a condition of the HPA, moving its lastTransitionTime when the status
// changes.
func setCondition(hpa *autoscalingv2.HorizontalPodAutoscaler, t autoscalingv2.HorizontalPodAutoscalerConditionType, status corev1.ConditionStatus, reason, message string, now time.Time) {
	conds := hpa.Status.Conditions
	var cond *autoscalingv2.HorizontalPodAutoscalerCondition
	for i := range conds {
		if conds[i].Type == t {
			cond = &conds[i]
			break
		}
	}
	if cond == nil {
		conds = append(conds, autoscalingv2.HorizontalPodAutoscalerCondition{Type: t})
		cond = &conds[len(conds)-1]
	}
	if cond.Status != status {
		cond.LastTransitionTime = metav1.NewTime(now)
	}
	cond.Status, cond.Reason, cond.Message = status, reason, message
	hpa.Status.Conditions = conds
}

// updateStatusIfNeeded writes the HPA's status when it changed.
func (c *Controller) updateStatusIfNeeded(ctx context.Context, old *autoscalingv2.HorizontalPodAutoscalerStatus, hpa *autoscalingv2.HorizontalPodAutoscaler) error {
	if apiequality.Semantic.DeepEqual(old, &hpa.Status) {
		return nil
	}
	if _, err := c.client.AutoscalingV2().HorizontalPodAutoscalers(hpa.Namespace).UpdateStatus(ctx, hpa, metav1.UpdateOptions{}); err != nil {
		c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedUpdateStatus", err.Error())
		return fmt.Errorf("failed to update status for %s: %w", hpa.Name, err)
	}
	return nil
}
