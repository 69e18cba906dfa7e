package apiserver

import (
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDefaultStorageClass(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	class := func(name string, created time.Time, ann map[string]string) storagev1.StorageClass {
		return storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created), Annotations: ann}}
	}
	isDefault := map[string]string{annIsDefaultStorageClass: "true"}
	cases := []struct {
		name    string
		classes []storagev1.StorageClass
		want    string
	}{
		{"no classes", nil, ""},
		{"no default", []storagev1.StorageClass{class("a", t0, nil), class("b", t0, map[string]string{annIsDefaultStorageClass: "false"})}, ""},
		{"one default", []storagev1.StorageClass{class("a", t0, nil), class("local", t0, isDefault)}, "local"},
		{"beta annotation", []storagev1.StorageClass{class("old", t0, map[string]string{annBetaIsDefaultStorageClass: "true"})}, "old"},
		{"newest default wins", []storagev1.StorageClass{class("new", t0.Add(time.Hour), isDefault), class("local", t0, isDefault)}, "new"},
		{"same age: smaller name", []storagev1.StorageClass{class("z", t0, isDefault), class("m", t0, isDefault)}, "m"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := defaultStorageClass(c.classes); got != c.want {
				t.Errorf("defaultStorageClass = %q, want %q", got, c.want)
			}
		})
	}
}
