package podautoscaler

import (
	"errors"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// podMetric is a pod's usage of a resource over a window ending at Timestamp, in milli-units
// (millicores, or thousandths of a byte).
type podMetric struct {
	Timestamp time.Time
	Window    time.Duration
	Value     int64
}

// podMetrics is the usage of the pods that have metrics, by pod name.
type podMetrics map[string]podMetric

// tolerances is how far the usage ratio may be from 1 without a scale down or up.
type tolerances struct {
	scaleDown, scaleUp float64
}

func (t tolerances) isWithin(ratio float64) bool {
	return (1.0-t.scaleDown) <= ratio && ratio <= (1.0+t.scaleUp)
}

// replicaCalculator proposes replica counts from pod metrics, as upstream's:
//
//   - pods being deleted, and Failed or Succeeded ones, are ignored;
//   - Pending pods, and for CPU the pods that are not ready yet or whose sample may include
//     their start (see groupPods), are "unready": left out, except that when the others ask for
//     a scale up they count as using nothing;
//   - pods without metrics count as using their full request (the target for an AverageValue)
//     when the others ask for a scale down, and nothing when they ask for a scale up;
//   - a change within the tolerance, or one that those assumptions would reverse, is no change.
type replicaCalculator struct {
	// cpuInitializationPeriod is how long after a pod starts its CPU samples are suspect (5 min).
	cpuInitializationPeriod time.Duration
	// delayOfInitialReadinessStatus is how long after a pod starts a not-ready pod may still
	// become ready for the first time (30 s).
	delayOfInitialReadinessStatus time.Duration
}

// resourceReplicas proposes a replica count for a target utilization (percent of the pods'
// requests) and returns the current utilization and the average usage (milli-units) of the
// pods with metrics.
func (c *replicaCalculator) resourceReplicas(now time.Time, currentReplicas, targetUtilization int32, resource corev1.ResourceName,
	container string, tol tolerances, metrics podMetrics, pods []*corev1.Pod) (replicas, utilization int32, rawUtilization int64, err error) {
	if len(pods) == 0 {
		return 0, 0, 0, errors.New("no pods returned by selector while calculating replica count")
	}
	metrics = copyMetrics(metrics)
	readyPodCount, unreadyPods, missingPods, ignoredPods := c.groupPods(now, pods, metrics, resource)
	removeMetricsForPods(metrics, ignoredPods)
	removeMetricsForPods(metrics, unreadyPods)
	if len(metrics) == 0 {
		return 0, 0, 0, errors.New("did not receive metrics for targeted pods (pods might be unready)")
	}
	requests, err := calculatePodRequests(pods, container, resource)
	if err != nil {
		return 0, 0, 0, err
	}
	usageRatio, utilization, rawUtilization, err := resourceUtilizationRatio(metrics, requests, targetUtilization)
	if err != nil {
		return 0, 0, 0, err
	}

	scaleUpWithUnready := len(unreadyPods) > 0 && usageRatio > 1.0
	if !scaleUpWithUnready && len(missingPods) == 0 {
		if tol.isWithin(usageRatio) {
			return currentReplicas, utilization, rawUtilization, nil
		}
		// Without unready or missing pods, the ratio is exact.
		return int32(math.Ceil(usageRatio * float64(readyPodCount))), utilization, rawUtilization, nil
	}
	if len(missingPods) > 0 {
		if usageRatio < 1.0 {
			// Scaling down: missing pods use their whole request (or the target if above 100 %).
			fallback := int64(max(100, targetUtilization))
			for name := range missingPods {
				metrics[name] = podMetric{Value: requests[name] * fallback / 100}
			}
		} else if usageRatio > 1.0 {
			for name := range missingPods {
				metrics[name] = podMetric{Value: 0}
			}
		}
	}
	if scaleUpWithUnready {
		for name := range unreadyPods {
			metrics[name] = podMetric{Value: 0}
		}
	}
	newUsageRatio, _, _, err := resourceUtilizationRatio(metrics, requests, targetUtilization)
	if err != nil {
		return 0, utilization, rawUtilization, err
	}
	if tol.isWithin(newUsageRatio) || (usageRatio < 1.0 && newUsageRatio > 1.0) || (usageRatio > 1.0 && newUsageRatio < 1.0) {
		return currentReplicas, utilization, rawUtilization, nil
	}
	newReplicas := int32(math.Ceil(newUsageRatio * float64(len(metrics))))
	if (newUsageRatio < 1.0 && newReplicas > currentReplicas) || (newUsageRatio > 1.0 && newReplicas < currentReplicas) {
		// The pods counted would reverse the direction: no change.
		return currentReplicas, utilization, rawUtilization, nil
	}
	return newReplicas, utilization, rawUtilization, nil
}

// rawResourceReplicas proposes a replica count for a target average usage (milli-units) and
// returns the current average usage of the pods with metrics.
func (c *replicaCalculator) rawResourceReplicas(now time.Time, currentReplicas int32, targetUsage int64, resource corev1.ResourceName,
	tol tolerances, metrics podMetrics, pods []*corev1.Pod) (replicas int32, usage int64, err error) {
	if len(pods) == 0 {
		return 0, 0, errors.New("no pods returned by selector while calculating replica count")
	}
	metrics = copyMetrics(metrics)
	readyPodCount, unreadyPods, missingPods, ignoredPods := c.groupPods(now, pods, metrics, resource)
	removeMetricsForPods(metrics, ignoredPods)
	removeMetricsForPods(metrics, unreadyPods)
	if len(metrics) == 0 {
		return 0, 0, errors.New("did not receive metrics for targeted pods (pods might be unready)")
	}
	usageRatio, usage := metricUsageRatio(metrics, targetUsage)

	scaleUpWithUnready := len(unreadyPods) > 0 && usageRatio > 1.0
	if !scaleUpWithUnready && len(missingPods) == 0 {
		if tol.isWithin(usageRatio) {
			return currentReplicas, usage, nil
		}
		return int32(math.Ceil(usageRatio * float64(readyPodCount))), usage, nil
	}
	if len(missingPods) > 0 {
		if usageRatio < 1.0 {
			for name := range missingPods {
				metrics[name] = podMetric{Value: targetUsage}
			}
		} else {
			for name := range missingPods {
				metrics[name] = podMetric{Value: 0}
			}
		}
	}
	if scaleUpWithUnready {
		for name := range unreadyPods {
			metrics[name] = podMetric{Value: 0}
		}
	}
	newUsageRatio, _ := metricUsageRatio(metrics, targetUsage)
	if tol.isWithin(newUsageRatio) || (usageRatio < 1.0 && newUsageRatio > 1.0) || (usageRatio > 1.0 && newUsageRatio < 1.0) {
		return currentReplicas, usage, nil
	}
	newReplicas := int32(math.Ceil(newUsageRatio * float64(len(metrics))))
	if (newUsageRatio < 1.0 && newReplicas > currentReplicas) || (newUsageRatio > 1.0 && newReplicas < currentReplicas) {
		return currentReplicas, usage, nil
	}
	return newReplicas, usage, nil
}

// groupPods sorts the pods into ready ones (counted), unready ones, ones without metrics and
// ignored ones.
func (c *replicaCalculator) groupPods(now time.Time, pods []*corev1.Pod, metrics podMetrics, resource corev1.ResourceName) (readyPodCount int, unreadyPods, missingPods, ignoredPods sets.Set[string]) {
	unreadyPods, missingPods, ignoredPods = sets.New[string](), sets.New[string](), sets.New[string]()
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			ignoredPods.Insert(pod.Name)
			continue
		}
		if pod.Status.Phase == corev1.PodPending {
			unreadyPods.Insert(pod.Name)
			continue
		}
		metric, found := metrics[pod.Name]
		if !found {
			missingPods.Insert(pod.Name)
			continue
		}
		if resource == corev1.ResourceCPU && c.cpuUnready(now, pod, metric) {
			unreadyPods.Insert(pod.Name)
			continue
		}
		readyPodCount++
	}
	return readyPodCount, unreadyPods, missingPods, ignoredPods
}

// cpuUnready reports a pod whose CPU sample should not be trusted: not ready (or without a
// start time); or, within cpuInitializationPeriod of its start, not ready or ready too
// recently for a whole sample window since; or, later, never ready yet.
func (c *replicaCalculator) cpuUnready(now time.Time, pod *corev1.Pod, metric podMetric) bool {
	var ready *corev1.PodCondition
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			ready = &pod.Status.Conditions[i]
			break
		}
	}
	if ready == nil || pod.Status.StartTime == nil {
		return true
	}
	start := pod.Status.StartTime.Time
	if start.Add(c.cpuInitializationPeriod).After(now) {
		return ready.Status == corev1.ConditionFalse || metric.Timestamp.Before(ready.LastTransitionTime.Add(metric.Window))
	}
	return ready.Status == corev1.ConditionFalse && start.Add(c.delayOfInitialReadinessStatus).After(ready.LastTransitionTime.Time)
}

// calculatePodRequests returns each pod's request of resource (milli-units): its containers'
// (only container's, when set) and its restartable init containers' (sidecars). Every counted
// container must request the resource.
func calculatePodRequests(pods []*corev1.Pod, container string, resource corev1.ResourceName) (map[string]int64, error) {
	requests := make(map[string]int64, len(pods))
	for _, pod := range pods {
		containers := append([]corev1.Container{}, pod.Spec.Containers...)
		for _, c := range pod.Spec.InitContainers {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				containers = append(containers, c)
			}
		}
		var sum int64
		for _, c := range containers {
			if container != "" && c.Name != container {
				continue
			}
			req, ok := c.Resources.Requests[resource]
			if !ok {
				return nil, fmt.Errorf("missing request for %s in container %s of Pod %s", resource, c.Name, pod.Name)
			}
			sum += req.MilliValue()
		}
		requests[pod.Name] = sum
	}
	return requests, nil
}

// resourceUtilizationRatio returns the ratio of the utilization (usage over requests, of the
// pods with both) to the target, the utilization in percent, and the average usage.
func resourceUtilizationRatio(metrics podMetrics, requests map[string]int64, targetUtilization int32) (ratio float64, utilization int32, rawAverage int64, err error) {
	var metricsTotal, requestsTotal int64
	n := 0
	for name, m := range metrics {
		req, ok := requests[name]
		if !ok {
			continue
		}
		metricsTotal += m.Value
		requestsTotal += req
		n++
	}
	if requestsTotal == 0 {
		return 0, 0, 0, errors.New("no metrics returned matched known pods")
	}
	utilization = int32(metricsTotal * 100 / requestsTotal)
	return float64(utilization) / float64(targetUtilization), utilization, metricsTotal / int64(n), nil
}

// metricUsageRatio returns the ratio of the average usage to the target, and the average.
func metricUsageRatio(metrics podMetrics, targetUsage int64) (ratio float64, usage int64) {
	var total int64
	for _, m := range metrics {
		total += m.Value
	}
	usage = total / int64(len(metrics))
	return float64(usage) / float64(targetUsage), usage
}

func copyMetrics(m podMetrics) podMetrics {
	out := make(podMetrics, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func removeMetricsForPods(metrics podMetrics, pods sets.Set[string]) {
	for name := range pods {
		delete(metrics, name)
	}
}
