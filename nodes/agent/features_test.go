package agent

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestDeclaredFeatures(t *testing.T) {
	for _, v := range []string{"v1.37.2", "v0.0.0-master+$Format:%H$"} {
		got := DeclaredFeatures(v)
		if want := []string{"ExtendWebSocketsToKubelet"}; !reflect.DeepEqual(got, want) {
			t.Errorf("DeclaredFeatures(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestMissingFeatures(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	never := corev1.ContainerRestartPolicy("Never")
	restartAll := func(init bool) *corev1.Pod {
		c := corev1.Container{Name: "c", Image: "i", RestartPolicy: &never, RestartPolicyRules: []corev1.ContainerRestartRule{{
			Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
		}}}
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "i"}}}}
		if init {
			c.RestartPolicy = &always
			p.Spec.InitContainers = []corev1.Container{c}
		} else {
			p.Spec.Containers = []corev1.Container{c}
		}
		return p
	}
	plain := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "i"}},
		TerminationGracePeriodSeconds: ptr.To[int64](1)}}
	cases := []struct {
		name     string
		pod      *corev1.Pod
		declared []string
		want     []string
	}{
		{"a plain pod needs nothing", plain, nil, nil},
		{"restartPolicyRules RestartAllContainers on this agent", restartAll(false), DeclaredFeatures("v1.37.2"), []string{"RestartAllContainersOnContainerExits"}},
		{"the same rule on a sidecar", restartAll(true), nil, []string{"RestartAllContainersOnContainerExits"}},
		{"a node that declares it", restartAll(false), []string{"RestartAllContainersOnContainerExits"}, nil},
	}
	for _, tc := range cases {
		got, err := MissingFeatures(tc.pod, tc.declared, "v1.37.2")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(got) != len(tc.want) || (len(got) > 0 && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("%s: missing %v, want %v", tc.name, got, tc.want)
		}
	}
	reason, msg := featureRejection("host-1", []string{"RestartAllContainersOnContainerExits"})
	if reason != "NodeDeclaredFeatures" || !strings.Contains(msg, "host-1") || !strings.Contains(msg, "RestartAllContainersOnContainerExits") {
		t.Errorf("rejection %q %q must name the node and the feature", reason, msg)
	}
}
