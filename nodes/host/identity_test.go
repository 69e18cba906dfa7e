package host

import (
	"slices"
	"testing"

	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
)

// Every controller the leader runs has an identity and a bootstrap role: one without would
// run with only the controller manager's reads and fail every write.
func TestEveryControllerHasARole(t *testing.T) {
	names := rbac.ControllerNames()
	for _, c := range controllerList(DefaultConfig()) {
		if !slices.Contains(names, c.Name) {
			t.Errorf("controller %s has no role in the bootstrap policy (rbac.ControllerNames)", c.Name)
		}
	}
}
