package apiserver

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/validation"
)

// ensureBootstrapObjects creates the objects every site has (the system namespaces, the
// built-in PriorityClasses, ...), retrying until the API answers. Objects that exist are left
// as they are.
func ensureBootstrapObjects(ctx context.Context, client kubernetes.Interface) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range SystemNamespaces {
			_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return false, nil
			}
		}
		for _, pc := range validation.SystemPriorityClasses() {
			_, err := client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return false, nil
			}
		}
		return true, nil
	})
}
