package policies

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The inventory is what an admission policy cannot see by itself: other objects. A policy sees
// the object it admits and its params, so the policies that look across objects (an Ingress
// host taken in another namespace, a PodDisruptionBudget covering a Deployment) take as their
// param the ConfigMap kube-system/flotilla-policy-inventory, which a controller keeps from the
// site's objects (reconciler/controllers/policyinventory) and the offline engine computes from
// the objects it is given. Its keys:
//
//	ingress.<host>    "namespace/name,..." of the Ingresses with a rule for host, sorted; a
//	                  wildcard's "*" is written "_" (a key cannot hold "*")
//	pdb.<ns>.<name>   the selector of PodDisruptionBudget ns/name: requirements joined by ";",
//	                  each "key in v1|v2", "key notin v1|v2", "key exists" or "key !exists"
//	                  (matchLabels as "in" of one value); "" selects every pod; a budget
//	                  without a selector selects none and has no key
//
// A key longer than a ConfigMap key may be (253 characters) is left out.
const (
	InventoryNamespace = "kube-system"
	InventoryName      = "flotilla-policy-inventory"
)

// InventoryData is the inventory's data for the given Ingresses and PodDisruptionBudgets.
func InventoryData(ingresses []*networkingv1.Ingress, pdbs []*policyv1.PodDisruptionBudget) map[string]string {
	hosts := map[string][]string{}
	for _, ing := range ingresses {
		for _, r := range ing.Spec.Rules {
			if r.Host == "" {
				continue
			}
			k := "ingress." + strings.ReplaceAll(r.Host, "*", "_")
			if owner := ing.Namespace + "/" + ing.Name; !slices.Contains(hosts[k], owner) {
				hosts[k] = append(hosts[k], owner)
			}
		}
	}
	data := map[string]string{}
	for k, owners := range hosts {
		sort.Strings(owners)
		data[k] = strings.Join(owners, ",")
	}
	for _, p := range pdbs {
		if p.Spec.Selector == nil {
			continue
		}
		data["pdb."+p.Namespace+"."+p.Name] = selectorText(p.Spec.Selector)
	}
	maps.DeleteFunc(data, func(k, _ string) bool { return len(validation.IsConfigMapKey(k)) > 0 })
	return data
}

// selectorText writes a label selector as the inventory keeps it.
func selectorText(s *metav1.LabelSelector) string {
	var reqs []string
	for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
		reqs = append(reqs, k+" in "+s.MatchLabels[k])
	}
	for _, e := range s.MatchExpressions {
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			reqs = append(reqs, e.Key+" in "+strings.Join(e.Values, "|"))
		case metav1.LabelSelectorOpNotIn:
			reqs = append(reqs, e.Key+" notin "+strings.Join(e.Values, "|"))
		case metav1.LabelSelectorOpExists:
			reqs = append(reqs, e.Key+" exists")
		case metav1.LabelSelectorOpDoesNotExist:
			reqs = append(reqs, e.Key+" !exists")
		}
	}
	return strings.Join(reqs, ";")
}

// inventoryConfigMap is the inventory of the Ingresses and PodDisruptionBudgets among objs,
// as a ConfigMap.
func inventoryConfigMap(objs []*unstructured.Unstructured) (*unstructured.Unstructured, error) {
	var ingresses []*networkingv1.Ingress
	var pdbs []*policyv1.PodDisruptionBudget
	for _, o := range objs {
		switch gvk := o.GroupVersionKind(); gvk.GroupKind() {
		case networkingv1.SchemeGroupVersion.WithKind("Ingress").GroupKind():
			ing := &networkingv1.Ingress{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ing); err != nil {
				return nil, fmt.Errorf("Ingress %q: %w", o.GetName(), err)
			}
			ingresses = append(ingresses, withNamespace(ing))
		case policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget").GroupKind():
			p := &policyv1.PodDisruptionBudget{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, p); err != nil {
				return nil, fmt.Errorf("PodDisruptionBudget %q: %w", o.GetName(), err)
			}
			pdbs = append(pdbs, withNamespace(p))
		}
	}
	data := map[string]any{}
	for k, v := range InventoryData(ingresses, pdbs) {
		data[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": InventoryName, "namespace": InventoryNamespace},
		"data":       data,
	}}, nil
}

// withNamespace gives an object without a namespace "default", where the API puts it.
func withNamespace[T metav1.Object](o T) T {
	if o.GetNamespace() == "" {
		o.SetNamespace(metav1.NamespaceDefault)
	}
	return o
}
