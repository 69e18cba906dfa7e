package agent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSameStatusIgnoresHeartbeats(t *testing.T) {
	cfg := NodeConfig{Name: "n", Address: "10.0.0.1", KubeletVersion: "v1", AgentPort: 10250}
	cur := desiredStatus(cfg)
	time.Sleep(1100 * time.Millisecond) // heartbeat times have whole seconds
	want := desiredStatus(cfg)
	for i := range want.Conditions {
		want.Conditions[i].LastTransitionTime = cur.Conditions[i].LastTransitionTime
	}
	if want.Conditions[0].LastHeartbeatTime.Equal(&cur.Conditions[0].LastHeartbeatTime) {
		t.Fatal("the test wants two heartbeat times")
	}
	if !sameStatus(cur, want) {
		t.Error("a status that differs only in heartbeat times: want the same (not posted)")
	}
	notReady := *cur.DeepCopy()
	for i, c := range notReady.Conditions {
		if c.Type == corev1.NodeReady {
			notReady.Conditions[i].Status = corev1.ConditionUnknown // as the node lifecycle controller sets it
			notReady.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	if sameStatus(notReady, want) {
		t.Error("Ready Unknown stored, True wanted: want a difference (posted)")
	}
	moreImages := *want.DeepCopy()
	moreImages.Images = append(moreImages.Images, corev1.ContainerImage{Names: []string{"x"}, SizeBytes: 1})
	if sameStatus(cur, moreImages) {
		t.Error("a new image: want a difference (posted)")
	}
}
