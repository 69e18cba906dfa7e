// Package slim trims what informer caches hold of the objects they keep.
package slim

import "k8s.io/apimachinery/pkg/api/meta"

// DropManagedFields is an informer transform removing metadata.managedFields, often the
// largest part of an object's metadata. No flotilla component reads them from a cache, and
// an update sent without them keeps the stored ones (the API server takes the live
// object's when a request carries none), so caches need not hold them.
func DropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
