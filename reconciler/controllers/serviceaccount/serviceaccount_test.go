package serviceaccount_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/serviceaccount"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

// Every namespace gets ServiceAccount default, the existing ones
// included, and a deleted default comes back.
func TestDefaultServiceAccount(t *testing.T) {
	a, client := controllertest.Start(t, serviceaccount.New)
	ctx := context.Background()
	hasDefault := func(ns string) func() (bool, error) {
		return func() (bool, error) {
			_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		}
	}
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		controllertest.Eventually(t, 20*time.Second, "default service account in "+ns, hasDefault(ns))
	}
	a.MustKubectl("", "create", "namespace", "team-a")
	controllertest.Eventually(t, 20*time.Second, "default service account in team-a", hasDefault("team-a"))
	out := a.MustKubectl("", "get", "serviceaccount", "default", "-n", "team-a", "-o", "name")
	if out != "serviceaccount/default\n" {
		t.Errorf("kubectl get sa: %q", out)
	}

	a.MustKubectl("", "delete", "serviceaccount", "default", "-n", "team-a")
	controllertest.Eventually(t, 20*time.Second, "default service account re-created", hasDefault("team-a"))
}
