// Package policies is flotilla's built-in library of ValidatingAdmissionPolicies and an
// offline engine that evaluates objects against policies with the API server's own admission
// plugin.
//
// The library (directory library/) has one directory per policy: policy.yaml holds what a site
// installs (the policy, its binding and, for a parameterised policy, its param ConfigMap in
// kube-system), allowed/ and denied/ hold fixtures that `flotilla policy test` checks, and
// any other YAML file of the directory (e.g. context.yaml with Namespaces) is test context,
// never installed.
package policies

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed library
var library embed.FS

// The policy sets: a site enforces none, baseline, or restricted (which includes baseline).
const (
	SetNone       = "none"
	SetBaseline   = "baseline"
	SetRestricted = "restricted"
)

// SetLabel is the label every object of the library carries: the set its policy belongs to.
const SetLabel = "policies.flotilla.dev/set"

// Library returns the objects to install for set: those of every library/*/policy.yaml whose
// policy is in the set, ConfigMaps (params) first, then the policies, then their bindings
// (each group in policy order), so that a binding never refers to a policy or param not yet
// created. SetNone gives nil.
func Library(set string) ([]*unstructured.Unstructured, error) {
	var sets map[string]bool
	switch set {
	case SetNone:
		return nil, nil
	case SetBaseline:
		sets = map[string]bool{SetBaseline: true}
	case SetRestricted:
		sets = map[string]bool{SetBaseline: true, SetRestricted: true}
	default:
		return nil, fmt.Errorf("unknown policy set %q: use %s, %s or %s", set, SetNone, SetBaseline, SetRestricted)
	}
	files, err := fs.Glob(library, "library/*/policy.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var params, policies, bindings []*unstructured.Unstructured
	for _, f := range files {
		data, err := library.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := DecodeYAML(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		policySet := ""
		for _, o := range objs {
			if o.GroupVersionKind() == vapGVK {
				policySet = o.GetLabels()[SetLabel]
			}
		}
		if policySet != SetBaseline && policySet != SetRestricted {
			return nil, fmt.Errorf("%s: the ValidatingAdmissionPolicy must carry label %s: %s or %s", f, SetLabel, SetBaseline, SetRestricted)
		}
		if !sets[policySet] {
			continue
		}
		for _, o := range objs {
			switch o.GroupVersionKind() {
			case vapGVK:
				policies = append(policies, o)
			case bindingGVK:
				bindings = append(bindings, o)
			default:
				params = append(params, o)
			}
		}
	}
	return append(append(params, policies...), bindings...), nil
}

// LibraryFS is the library's directory tree (rooted at "library"), for `flotilla policy test`
// of the built-in policies.
func LibraryFS() fs.FS {
	sub, err := fs.Sub(library, "library")
	if err != nil {
		panic(err) // the embedded directory exists
	}
	return sub
}

// DecodeYAML decodes the objects of a multi-document YAML (or JSON) file. Empty documents are
// skipped; a document without apiVersion or kind is an error naming its position.
func DecodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for i := 1; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		if o.GetAPIVersion() == "" || o.GetKind() == "" {
			return nil, fmt.Errorf("document %d: apiVersion and kind are required", i)
		}
		objs = append(objs, o)
	}
}
