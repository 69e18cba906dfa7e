package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	metricsv1beta1 "k8s.io/metrics/pkg/client/clientset/versioned/typed/metrics/v1beta1"
)

// metricsClient reads the resource usage of pods.
type metricsClient interface {
	// resourceMetric returns the usage of resource by the pods matching selector (of one
	// container of each when container is set), and the time of the first sample.
	resourceMetric(ctx context.Context, resource corev1.ResourceName, namespace string, selector labels.Selector, container string) (podMetrics, time.Time, error)
}

// resourceMetricsClient reads PodMetrics of the metrics.k8s.io API.
type resourceMetricsClient struct {
	client metricsv1beta1.PodMetricsesGetter
}

func (c *resourceMetricsClient) resourceMetric(ctx context.Context, resource corev1.ResourceName, namespace string, selector labels.Selector, container string) (podMetrics, time.Time, error) {
	list, err := c.client.PodMetricses(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("unable to fetch metrics from resource metrics API: %w", err)
	}
	if len(list.Items) == 0 {
		return nil, time.Time{}, errors.New("no metrics returned from resource metrics API")
	}
	out := podMetrics{}
	for _, m := range list.Items {
		var sum int64
		missing := len(m.Containers) == 0
		found := container == ""
		for _, c := range m.Containers {
			if container != "" && c.Name != container {
				continue
			}
			found = true
			v, ok := c.Usage[resource]
			if !ok {
				missing = true
				break
			}
			sum += v.MilliValue()
		}
		if container != "" && !found {
			return nil, time.Time{}, fmt.Errorf("container %s not present in metrics for pod %s/%s", container, m.Namespace, m.Name)
		}
		if !missing {
			out[m.Name] = podMetric{Timestamp: m.Timestamp.Time, Window: m.Window.Duration, Value: sum}
		}
	}
	return out, list.Items[0].Timestamp.Time, nil
}
