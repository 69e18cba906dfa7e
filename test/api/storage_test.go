package api

import (
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestStorageClasses drives storage.k8s.io/v1 StorageClass through kubectl: discovery with the
// short name, defaulting, validation, the printed columns with the "(default)" marker, and a
// claim without a class getting the default class.
func TestStorageClasses(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})

	out := a.MustKubectl("", "api-resources", "--api-group=storage.k8s.io", "--no-headers")
	if f := strings.Fields(out); len(f) < 5 || f[0] != "storageclasses" || f[1] != "sc" || f[2] != "storage.k8s.io/v1" || f[3] != "false" || f[4] != "StorageClass" {
		t.Fatalf("api-resources storage.k8s.io:\n%s", out)
	}

	a.MustKubectl(`apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: flotilla.dev/local
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: slow
provisioner: example.com/nfs
reclaimPolicy: Retain
allowVolumeExpansion: true
`, "apply", "-f", "-")
	out = a.MustKubectl("", "get", "sc")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{
		{"NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"},
		{"local", "(default)", "flotilla.dev/local", "Delete", "WaitForFirstConsumer", "false"},
		{"slow", "example.com/nfs", "Retain", "Immediate", "true"},
	}
	if len(lines) != len(want) {
		t.Fatalf("kubectl get sc:\n%s", out)
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); len(got) < len(w) || strings.Join(got[:len(w)], " ") != strings.Join(w, " ") {
			t.Errorf("kubectl get sc line %d = %q, want prefix %q", i, lines[i], strings.Join(w, " "))
		}
	}

	for _, tc := range []struct{ name, manifest, field string }{
		{"no provisioner", "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: bad\n", "provisioner"},
		{"reclaimPolicy Recycle", "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: bad\nprovisioner: a.b/c\nreclaimPolicy: Recycle\n", "reclaimPolicy"},
		{"unknown binding mode", "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: bad\nprovisioner: a.b/c\nvolumeBindingMode: Later\n", "volumeBindingMode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, err := a.Kubectl(tc.manifest, "create", "-f", "-")
			if err == nil || !strings.Contains(errOut, "is invalid") || !strings.Contains(errOut, tc.field) {
				t.Errorf("want 422 naming %s, got err %v:\n%s", tc.field, err, errOut)
			}
		})
	}
	// Parameters are immutable.
	_, errOut, err := a.Kubectl("", "patch", "sc", "slow", "--type=merge", "-p", `{"parameters":{"server":"nfs.example"}}`)
	if err == nil || !strings.Contains(errOut, "parameters") {
		t.Errorf("parameters update accepted or unexplained: %v\n%s", err, errOut)
	}

	a.MustKubectl(`apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: default
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: static
  namespace: default
spec:
  storageClassName: ""
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`, "apply", "-f", "-")
	if got := a.MustKubectl("", "get", "pvc", "data", "-n", "default", "-o", "jsonpath={.spec.storageClassName}"); got != "local" {
		t.Errorf("claim without class got storageClassName %q, want the default class local", got)
	}
	if got := a.MustKubectl("", "get", "pvc", "static", "-n", "default", "-o", "jsonpath={.spec.storageClassName}"); got != "" {
		t.Errorf("claim with class \"\" got storageClassName %q", got)
	}
}
