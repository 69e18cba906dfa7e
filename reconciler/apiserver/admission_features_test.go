package apiserver

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func TestNodeFeatureValidator(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for name, features := range map[string][]string{
		"old-agent": {"ExtendWebSocketsToKubelet"},
		"new-agent": {"ExtendWebSocketsToKubelet", "InPlacePodVerticalScalingInitContainers"},
	} {
		_ = idx.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
			DeclaredFeatures: features, NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"}}})
	}
	v := &nodeFeatureValidator{Handler: admission.NewHandler(admission.Update), nodes: corelisters.NewNodeLister(idx)}
	pod := func(node, initCPU string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: node,
			InitContainers: []corev1.Container{{Name: "init", Image: "i", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse(initCPU)}}}},
			Containers: []corev1.Container{{Name: "app", Image: "i"}}}}
	}
	attrs := func(old, cur *corev1.Pod, op admission.Operation) admission.Attributes {
		return admission.NewAttributesRecord(cur, old, corev1.SchemeGroupVersion.WithKind("Pod"), "default", "p",
			corev1.SchemeGroupVersion.WithResource("pods"), "", op, nil, false, &user.DefaultInfo{Name: "u"})
	}
	cases := []struct {
		name     string
		old, cur *corev1.Pod
		wantErr  string
	}{
		{"init container resize on a node without the feature", pod("old-agent", "100m"), pod("old-agent", "200m"), "InPlacePodVerticalScalingInitContainers"},
		{"the same on a node that declares it", pod("new-agent", "100m"), pod("new-agent", "200m"), ""},
		{"an unbound pod is not checked", pod("", "100m"), pod("", "200m"), ""},
		{"an update that needs nothing", pod("old-agent", "100m"), pod("old-agent", "100m"), ""},
		{"a node that is gone", pod("gone", "100m"), pod("gone", "200m"), ""},
	}
	for _, tc := range cases {
		err := v.Validate(context.Background(), attrs(tc.old, tc.cur, admission.Update), nil)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "old-agent")):
			t.Errorf("%s: got %v, want a refusal naming the node and %s", tc.name, err, tc.wantErr)
		}
	}
	if !v.Handles(admission.Update) || v.Handles(admission.Create) {
		t.Error("the plugin handles pod UPDATE only")
	}
}
