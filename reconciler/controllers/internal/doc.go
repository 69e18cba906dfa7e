// Package internal holds what the workload controllers (ReplicaSet, Deployment) share: creation
// and deletion expectations, pod readiness and availability, the ranking of pods for scale-down,
// the pod-template-hash, the adoption and release of dependents, and slow-start batches; and the
// workqueue worker loop of the controllers keyed by namespace/name.
package internal
