package statefulset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
)

// templatePatch is the data of a ControllerRevision: the strategic merge patch that puts the
// set's template back, {"spec":{"template":{...,"$patch":"replace"}}}. kubectl rollout undo
// sends it as is.
func templatePatch(set *appsv1.StatefulSet) ([]byte, error) {
	raw, err := json.Marshal(set.Spec.Template)
	if err != nil {
		return nil, err
	}
	var tmpl map[string]any
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		return nil, err
	}
	tmpl["$patch"] = "replace"
	// Maps marshal with sorted keys: equal templates give equal bytes.
	return json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
}

// hashRevision is upstream's ControllerRevision hash: fnv-32 of the data (and of the
// collision count), SafeEncodeString'd.
func hashRevision(data []byte, collisionCount *int32) string {
	h := fnv.New32()
	h.Write(data)
	if collisionCount != nil {
		h.Write([]byte(strconv.FormatInt(int64(*collisionCount), 10)))
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// revisionName is "<set>-<hash>", the prefix cut so that the name stays valid.
func revisionName(prefix, hash string) string {
	if len(prefix) > 223 {
		prefix = prefix[:223]
	}
	return prefix + "-" + hash
}

// newRevision is the ControllerRevision of set's current template, numbered revision.
func newRevision(set *appsv1.StatefulSet, revision int64, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	data, err := templatePatch(set)
	if err != nil {
		return nil, fmt.Errorf("template of %s/%s: %w", set.Namespace, set.Name, err)
	}
	hash := hashRevision(data, collisionCount)
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            revisionName(set.Name, hash),
			Namespace:       set.Namespace,
			Labels:          maps.Clone(set.Spec.Template.Labels),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, controllerKind)},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: revision,
	}
	if cr.Labels == nil {
		cr.Labels = map[string]string{}
	}
	cr.Labels[RevisionLabel] = hash
	return cr, nil
}

// equalRevision reports whether two revisions hold the same template.
func equalRevision(a, b *appsv1.ControllerRevision) bool {
	return bytes.Equal(compactJSON(a.Data.Raw), compactJSON(b.Data.Raw))
}

func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

// sortRevisions orders revisions by number, then name.
func sortRevisions(revs []*appsv1.ControllerRevision) {
	sort.SliceStable(revs, func(i, j int) bool {
		if revs[i].Revision != revs[j].Revision {
			return revs[i].Revision < revs[j].Revision
		}
		return revs[i].Name < revs[j].Name
	})
}

// nextRevision is one more than the highest revision (1 when there is none); revs sorted.
func nextRevision(revs []*appsv1.ControllerRevision) int64 {
	if len(revs) == 0 {
		return 1
	}
	return revs[len(revs)-1].Revision + 1
}

// applyRevision returns a copy of set with the template stored in rev.
func applyRevision(set *appsv1.StatefulSet, rev *appsv1.ControllerRevision) (*appsv1.StatefulSet, error) {
	var patch struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(rev.Data.Raw, &patch); err != nil {
		return nil, fmt.Errorf("decode revision %s: %w", rev.Name, err)
	}
	out := set.DeepCopy()
	out.Spec.Template = patch.Spec.Template
	return out, nil
}

// historyToDelete returns the revisions beyond limit that no pod and neither status revision
// uses, oldest first; revs sorted.
func historyToDelete(revs []*appsv1.ControllerRevision, live map[string]bool, limit int) []*appsv1.ControllerRevision {
	var dead []*appsv1.ControllerRevision
	for _, r := range revs {
		if !live[r.Name] {
			dead = append(dead, r)
		}
	}
	if len(dead) <= limit {
		return nil
	}
	return dead[:len(dead)-limit]
}
