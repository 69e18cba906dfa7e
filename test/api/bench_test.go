package api

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// BenchmarkAPI measures round trips through the real agent (TLS, admission, etcd commit).
// `make bench` runs it and prints ns/op per operation.
func BenchmarkAPI(b *testing.B) {
	a := framework.StartAgent(b, framework.AgentOptions{Extra: []string{"--controllers="}})
	c := a.Client()
	ctx := context.Background()
	b.Run("create-configmap", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%d-%d", b.N, i)}, Data: map[string]string{"k": "v"}}
			if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get-configmap", func(b *testing.B) {
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bench-get"}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.CoreV1().ConfigMaps("default").Get(ctx, "bench-get", metav1.GetOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("create-service-with-clusterip", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%d-%d", b.N, i)},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
			if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
