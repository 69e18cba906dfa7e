// Package podvolumes names the volume types and projected volume sources flotilla's node
// agent carries out, for the agent's refusals and the API's warnings alike.
package podvolumes

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Types are the volume types the node agent mounts, by their field in spec.volumes[].
var Types = []string{"emptyDir", "configMap", "secret", "downwardAPI", "projected", "hostPath", "persistentVolumeClaim", "ephemeral"}

// ProjectionTypes are the sources of a projected volume the node agent writes.
var ProjectionTypes = []string{"configMap", "secret", "downwardAPI", "serviceAccountToken"}

// TypeOf is the field name of the source set in v (a volume's, a projection's or a
// PersistentVolume's source), "" when none is.
func TypeOf[T corev1.VolumeSource | corev1.VolumeProjection | corev1.PersistentVolumeSource](v *T) string {
	rv := reflect.ValueOf(v).Elem()
	for i := 0; i < rv.NumField(); i++ {
		if f := rv.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return ""
}

// Unsupported lists, one message each, the volumes and projected sources of spec the node
// agent does not carry out (a pod with one of them never starts); path is where spec is in
// the object ("spec" for a pod, "spec.template.spec" for a workload).
func Unsupported(path string, spec *corev1.PodSpec) []string {
	var out []string
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		at := fmt.Sprintf("%s.volumes[%d]", path, i)
		if t := TypeOf(&v.VolumeSource); t != "" && !slices.Contains(Types, t) {
			out = append(out, fmt.Sprintf("%s.%s (volume %q) is not carried out by flotilla: the pod cannot start; the node agent mounts %s volumes",
				at, t, v.Name, List(Types)))
		}
		if v.Projected == nil {
			continue
		}
		for j := range v.Projected.Sources {
			if t := TypeOf(&v.Projected.Sources[j]); t != "" && !slices.Contains(ProjectionTypes, t) {
				out = append(out, fmt.Sprintf("%s.projected.sources[%d].%s (volume %q) is not carried out by flotilla: the pod cannot start; a projected volume may hold %s",
					at, j, t, v.Name, List(ProjectionTypes)))
			}
		}
	}
	return out
}

// List joins names as "a, b or c".
func List(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
