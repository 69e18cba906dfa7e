package internal

import (
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/apimachinery/pkg/util/rand"
)

// PodTemplateHashLabel is the label the Deployment controller adds to its ReplicaSets, their
// selectors and pod templates (appsv1.DefaultDeploymentUniqueLabelKey).
const PodTemplateHashLabel = "pod-template-hash"

// deepHashObject writes a stable dump of obj (pointers followed, map keys sorted) into h, as
// upstream's hashutil.DeepHashObject does.
func deepHashObject(h hash.Hash, obj any) {
	h.Reset()
	fmt.Fprintf(h, "%v", dump.ForHash(obj))
}

// ComputeHash returns the pod-template-hash of a Deployment's template: an fnv-32a hash of the
// template (and of collisionCount, when set, to step around a name collision), encoded with
// rand.SafeEncodeString. It equals upstream's, so ReplicaSets keep their names across
// controllers.
func ComputeHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	deepHashObject(h, *template)
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		h.Write(b)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// EqualIgnoreHash reports whether two pod templates are equal apart from the
// pod-template-hash label: the test that finds a Deployment's ReplicaSet for its current
// template (after a rollback too, where the template is copied back from the ReplicaSet).
func EqualIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, PodTemplateHashLabel)
	delete(b.Labels, PodTemplateHashLabel)
	if len(a.Labels) == 0 {
		a.Labels = nil
	}
	if len(b.Labels) == 0 {
		b.Labels = nil
	}
	return apiequality.Semantic.DeepEqual(a, b)
}
