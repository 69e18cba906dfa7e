package api

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// psaPod is a pod named name in namespace ns with the given spec lines (indented under spec:).
func psaPod(ns, name, spec string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\nspec:\n" + spec
}

const (
	// privilegedSpec runs a privileged container.
	privilegedSpec = `  containers:
  - name: c
    image: flotilla.local/toolbox:latest
    securityContext:
      privileged: true
`
	// hostRootSpec shares the host's network and PID namespaces and mounts its root.
	hostRootSpec = `  hostNetwork: true
  hostPID: true
  containers:
  - name: c
    image: flotilla.local/toolbox:latest
  volumes:
  - name: root
    hostPath:
      path: /
`
	// plainSpec passes baseline, not restricted.
	plainSpec = `  containers:
  - name: c
    image: flotilla.local/toolbox:latest
`
)

const hostNetworkDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: on-the-host
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: on-the-host}
  template:
    metadata:
      labels: {app: on-the-host}
    spec:
      hostNetwork: true
      containers:
      - name: c
        image: flotilla.local/toolbox:latest
`

// TestPodSecurity checks Pod Security admission with the default site level (baseline) through
// kubectl: PSA's refusals and warnings, namespace labels, exempt system namespaces.
func TestPodSecurity(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers="}})

	// apply runs kubectl apply -f - and returns its stderr and whether it succeeded.
	apply := func(manifest string) (string, bool) {
		_, errOut, err := a.Kubectl(manifest, "apply", "-f", "-")
		return errOut, err == nil
	}
	wantRefused := func(t *testing.T, manifest, want string) {
		t.Helper()
		errOut, ok := apply(manifest)
		if ok || !strings.Contains(errOut, "(Forbidden)") || !strings.Contains(errOut, want) {
			t.Fatalf("kubectl apply: accepted=%v, stderr:\n%s\nwant Forbidden with %q", ok, errOut, want)
		}
	}

	t.Run("kube-system is labelled privileged", func(t *testing.T) {
		out := a.MustKubectl("", "get", "ns", "kube-system", "--show-labels")
		if !strings.Contains(out, "pod-security.kubernetes.io/enforce=privileged") {
			t.Fatalf("kubectl get ns kube-system --show-labels:\n%s", out)
		}
	})

	t.Run("default refuses privileged and hostPath pods with PSA's message", func(t *testing.T) {
		wantRefused(t, psaPod("default", "priv", privilegedSpec),
			`pods "priv" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)`)
		wantRefused(t, psaPod("default", "hostroot", hostRootSpec),
			`pods "hostroot" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true), hostPath volumes (volume "root")`)
		if out, _, err := a.Kubectl("", "get", "pods", "-n", "default", "priv", "hostroot"); err == nil {
			t.Fatalf("refused pods were stored:\n%s", out)
		}
		if errOut, ok := apply(psaPod("default", "plain", plainSpec)); !ok || strings.Contains(errOut, "Warning") {
			t.Fatalf("a baseline pod in default: accepted=%v, stderr:\n%s", ok, errOut)
		}
	})

	t.Run("a namespace labelled enforce=privileged accepts them", func(t *testing.T) {
		a.MustKubectl("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: psa-privileged\n  labels:\n    pod-security.kubernetes.io/enforce: privileged\n",
			"apply", "-f", "-")
		for name, spec := range map[string]string{"priv": privilegedSpec, "hostroot": hostRootSpec} {
			errOut, ok := apply(psaPod("psa-privileged", name, spec))
			if !ok {
				t.Fatalf("pod %s refused in a privileged namespace:\n%s", name, errOut)
			}
			// The warn level was not labelled: the site default's applies.
			if !strings.Contains(errOut, `Warning: would violate PodSecurity "baseline:latest"`) {
				t.Errorf("pod %s: stderr %q, want the default warn level's warning", name, errOut)
			}
		}
		a.MustKubectl("", "get", "pods", "-n", "psa-privileged", "priv", "hostroot")
	})

	t.Run("warn=restricted: accepted with warnings", func(t *testing.T) {
		a.MustKubectl("", "create", "namespace", "psa-warned")
		a.MustKubectl("", "label", "namespace", "psa-warned", "pod-security.kubernetes.io/enforce=privileged", "pod-security.kubernetes.io/warn=restricted")
		errOut, ok := apply(psaPod("psa-warned", "plain", plainSpec))
		if !ok || !strings.Contains(errOut, `Warning: would violate PodSecurity "restricted:latest"`) ||
			!strings.Contains(errOut, `runAsNonRoot != true`) {
			t.Fatalf("kubectl apply: accepted=%v, stderr:\n%s\nwant the restricted warnings", ok, errOut)
		}
	})

	t.Run("a Deployment whose template violates baseline gets a warning", func(t *testing.T) {
		errOut, ok := apply(hostNetworkDeployment)
		if !ok || !strings.Contains(errOut, `Warning: would violate PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`) {
			t.Fatalf("kubectl apply: accepted=%v, stderr:\n%s", ok, errOut)
		}
	})

	t.Run("namespace labels are validated and tightening warns about existing pods", func(t *testing.T) {
		_, errOut, err := a.Kubectl("", "label", "--overwrite", "namespace", "psa-warned", "pod-security.kubernetes.io/enforce=superuser")
		if err == nil || !strings.Contains(errOut, "is invalid") || !strings.Contains(errOut, "pod-security.kubernetes.io/enforce") {
			t.Fatalf("an unknown level was not refused: %v\n%s", err, errOut)
		}
		_, errOut, err = a.Kubectl("", "label", "--overwrite", "namespace", "psa-privileged", "pod-security.kubernetes.io/enforce=baseline")
		if err != nil {
			t.Fatalf("kubectl label: %v\n%s", err, errOut)
		}
		for _, want := range []string{
			`Warning: existing pods in namespace "psa-privileged" violate the new PodSecurity enforce level "baseline:latest"`,
			`Warning: hostroot: host namespaces, hostPath volumes`,
			`Warning: priv: privileged`,
		} {
			if !strings.Contains(errOut, want) {
				t.Errorf("kubectl label stderr:\n%s\nwant %q", errOut, want)
			}
		}
	})

	t.Run("kube-system is exempt", func(t *testing.T) {
		errOut, ok := apply(psaPod("kube-system", "hostroot", hostRootSpec))
		if !ok || strings.Contains(errOut, "Warning") {
			t.Fatalf("kubectl apply in kube-system: accepted=%v, stderr:\n%s", ok, errOut)
		}
	})
}

// TestPodSecurityDefaultFlag checks --pod-security-default: another level applies to namespaces
// without labels, and a bad value stops the agent at start with a message naming the flag.
func TestPodSecurityDefaultFlag(t *testing.T) {
	t.Run("a bad value is refused at start", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, framework.FlotillaBin(t), "agent", "--data-dir", t.TempDir(), "--name", "host-1",
			"--listen-address", "127.0.0.1", "--pod-security-default", "strict").CombinedOutput()
		want := `--pod-security-default "strict": use privileged, baseline or restricted`
		if err == nil || !strings.Contains(string(out), want) {
			t.Fatalf("agent with --pod-security-default strict: %v\n%s\nwant a failure with %q", err, out, want)
		}
	})

	t.Run("restricted", func(t *testing.T) {
		a := framework.StartAgent(t, framework.AgentOptions{Extra: []string{"--controllers=", "--pod-security-default=restricted"}})
		_, errOut, err := a.Kubectl(psaPod("default", "plain", plainSpec), "apply", "-f", "-")
		if err == nil || !strings.Contains(errOut, `pods "plain" is forbidden: violates PodSecurity "restricted:latest"`) {
			t.Fatalf("a baseline pod under a restricted default: %v\n%s", err, errOut)
		}
	})
}
