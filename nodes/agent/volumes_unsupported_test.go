package agent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUnsupportedVolumes: a volume type or projected source the agent does not carry out
// stops the pod with a message naming it and what is supported, rather than a container
// started without the files it expects.
func TestUnsupportedVolumes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		volume corev1.VolumeSource
		want   string
	}{
		{"nfs", corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nas", Path: "/export"}},
			`volume "v": volume type nfs is not supported by flotilla (use emptyDir, configMap, secret, downwardAPI, projected, hostPath, persistentVolumeClaim or ephemeral)`},
		{"csi", corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "x"}}, "volume type csi is not supported"},
		{"clusterTrustBundle", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
			{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Path: "ca.pem"}},
		}}}, `volume "v": projected source clusterTrustBundle is not supported by flotilla (use configMap, secret, downwardAPI or serviceAccountToken)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
				Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: tc.volume}}}}
			_, err := prepareVolumes(pod, t.TempDir(), volumeSources{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %s", err, tc.want)
			}
		})
	}
}
