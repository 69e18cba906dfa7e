package printers

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// gitSourcePrinter shows what `kubectl get gitsources` shows for a flux source: where it
// pulls from, what it applied, and whether that worked.
var gitSourcePrinter = named([]metav1.TableColumnDefinition{
	col("URL", "string", "The repository."),
	col("Revision", "string", "The last revision applied."),
	col("Ready", "string", "Whether the last revision fetched was applied."),
	col("Message", "string", "Why, in words."),
	ageColumn,
}, func(gs *flotillav1alpha1.GitSource, c clock) []any {
	ready, msg := "Unknown", ""
	for _, cond := range gs.Status.Conditions {
		if cond.Type == "Ready" {
			ready, msg = string(cond.Status), cond.Message
		}
	}
	return []any{gs.Spec.URL, gs.Status.LastAppliedRevision, ready, msg, c.age(gs.CreationTimestamp)}
})
