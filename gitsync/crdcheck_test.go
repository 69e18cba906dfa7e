package gitsync

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            x-kubernetes-validations:
            - rule: self.minSize <= self.size
              message: minSize must not exceed size
            properties:
              size: {type: integer, minimum: 1, maximum: 10}
              minSize: {type: integer, default: 1}
              color: {type: string, enum: [red, blue]}
          status:
            type: object
            properties:
              ready: {type: boolean}
  - name: v1beta1
    served: false
    storage: false
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// gadgetCRD is not structural: spec.properties.size has no type.
const gadgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Cluster
  names: {plural: gadgets, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {minimum: 1}
`

// otherWidgetCRD defines kind Widget of example.com a second time.
const otherWidgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: otherwidgets.example.com
spec:
  group: example.com
  scope: Cluster
  names: {plural: otherwidgets, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object}
`

func crdObj(t *testing.T, y, file string) Object {
	t.Helper()
	return Object{Obj: &unstructured.Unstructured{Object: planObj(t, y)}, File: file}
}

func widget(spec string) string {
	return "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: default}\nspec: " + spec + "\n"
}

func TestCRDCheck(t *testing.T) {
	ctx := context.Background()
	crds := NewCRDCheck([]Object{crdObj(t, widgetCRD, "crds/widget.yaml"), crdObj(t, gadgetCRD, "crds/gadget.yaml")})
	tests := []struct {
		name string
		obj  string
		file string
		// want is the exact failure line ("" for valid) unless contains is set.
		want     string
		contains []string
	}{
		{name: "valid", obj: widget("{size: 5, color: red}")},
		{name: "status is not written on create", obj: widget("{size: 5}") + "status: {ready: not-a-bool}\n"},
		{name: "schema violation", obj: widget("{size: 11}"),
			want: "Widget default/w1: spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"},
		{name: "schema violation names the file", obj: widget("{size: 0, minSize: 0}"), file: "apps/w.yaml",
			want: "apps/w.yaml: Widget default/w1: spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"},
		{name: "enum", obj: widget("{size: 5, color: green}"),
			// As the server: a blocking error keeps the CEL rules from running, and says so.
			want: `Widget default/w1: spec.color: Unsupported value: "green": supported values: "red", "blue"; ` +
				"Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"},
		{name: "CEL violation", obj: widget("{size: 2, minSize: 5}"),
			want: `Widget default/w1: spec: Invalid value: minSize must not exceed size`},
		{name: "CEL sees defaults", obj: widget("{size: 0}"), contains: []string{"spec.size in body should be greater than or equal to 1",
			"spec: Invalid value: minSize must not exceed size"}},
		{name: "defaults pass CEL", obj: widget("{size: 1}")},
		{name: "required, CEL not run", obj: widget("{}"),
			contains: []string{"spec.size: Required value", "some validation rules were not checked"}},
		{name: "undeclared field", obj: widget("{size: 5, sise: 6}"),
			want: "Widget default/w1: spec.sise: field not declared in schema"},
		{name: "invalid name", obj: strings.Replace(widget("{size: 5}"), "name: w1", "name: W_1", 1),
			contains: []string{"metadata.name: Invalid value: \"W_1\""}},
		{name: "unknown version", obj: strings.Replace(widget("{size: 5}"), "example.com/v1", "example.com/v2", 1),
			want: `Widget default/w1: apiVersion: Unsupported value: "example.com/v2": supported values: "example.com/v1" (the versions CustomResourceDefinition widgets.example.com of this revision serves)`},
		{name: "version not served", obj: strings.Replace(widget("{size: 5}"), "example.com/v1", "example.com/v1beta1", 1),
			contains: []string{`apiVersion: Unsupported value: "example.com/v1beta1"`}},
		{name: "non-structural CRD: its resources are not checked", obj: "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\nspec: {size: 0}\n",
			want: "Gadget g: not checked: its CustomResourceDefinition gadgets.example.com in this revision is invalid"},
		{name: "no namespace: checked in default as Prepare sets it", obj: strings.Replace(widget("{size: 5}"), ", namespace: default", "", 1)},
		{name: "kind not defined in the revision: left to the server", obj: "apiVersion: example.com/v1\nkind: Other\nmetadata: {name: o, namespace: default}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := crds.Check(ctx, crdObj(t, tt.obj, tt.file))
			if tt.contains == nil && got != tt.want {
				t.Fatalf("Check =\n  %q\nwant\n  %q", got, tt.want)
			}
			for _, s := range tt.contains {
				if !strings.Contains(got, s) {
					t.Errorf("Check = %q, want it to contain %q", got, s)
				}
			}
		})
	}

	if line := crds.CheckCRD(crdObj(t, widgetCRD, "crds/widget.yaml")); line != "" {
		t.Errorf("valid CRD: %s", line)
	}
	line := crds.CheckCRD(crdObj(t, gadgetCRD, "crds/gadget.yaml"))
	if !strings.HasPrefix(line, "crds/gadget.yaml: CustomResourceDefinition gadgets.example.com: ") ||
		!strings.Contains(line, "spec.validation.openAPIV3Schema.properties[spec].properties[size].type: Required value: must not be empty for specified object fields") {
		t.Errorf("non-structural CRD: %q", line)
	}
	scopes := crdScopes([]Object{crdObj(t, widgetCRD, ""), crdObj(t, gadgetCRD, ""), crdObj(t, widget("{}"), "")})
	if want := map[schema.GroupKind]bool{{Group: "example.com", Kind: "Widget"}: true, {Group: "example.com", Kind: "Gadget"}: false}; !reflect.DeepEqual(scopes, want) {
		t.Errorf("crdScopes = %v, want %v", scopes, want)
	}
	if crds.Defines(schema.GroupKind{Group: "example.com", Kind: "Other"}) {
		t.Error("Other is not defined in the revision")
	}

	d := crds.Default(ctx, crdObj(t, widget("{size: 5}")+"status: {ready: true}\n", ""))
	if d == nil {
		t.Fatal("Default of a valid Widget is nil")
	}
	if v, _, _ := unstructured.NestedInt64(d.Object, "spec", "minSize"); v != 1 {
		t.Errorf("default spec.minSize not applied: %v", d.Object)
	}
	if _, ok := d.Object["status"]; ok {
		t.Errorf("status kept on create: %v", d.Object)
	}
}

func TestCRDCheckDuplicateKind(t *testing.T) {
	crds := NewCRDCheck([]Object{crdObj(t, widgetCRD, ""), crdObj(t, otherWidgetCRD, "")})
	line := crds.CheckCRD(crdObj(t, otherWidgetCRD, ""))
	want := `CustomResourceDefinition otherwidgets.example.com: spec.names.kind: Duplicate value: "Widget": kind Widget of group example.com is also defined by CustomResourceDefinition widgets.example.com in this revision`
	if line != want {
		t.Fatalf("CheckCRD = %q, want %q", line, want)
	}
	// The first definition still checks its resources.
	if got := crds.Check(context.Background(), crdObj(t, widget("{size: 11}"), "")); !strings.Contains(got, "spec.size") {
		t.Fatalf("Check = %q", got)
	}
}

func TestCRDEstablished(t *testing.T) {
	cond := func(conds ...string) *unstructured.Unstructured {
		var list []any
		for _, c := range conds {
			p := strings.SplitN(c, "|", 4)
			list = append(list, map[string]any{"type": p[0], "status": p[1], "reason": p[2], "message": p[3]})
		}
		return &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": list}}}
	}
	tests := []struct {
		u           *unstructured.Unstructured
		established bool
		why         string
		refused     bool
	}{
		{cond(), false, "", false},
		{cond("NamesAccepted|True|NoConflicts|no conflicts found", "Established|True|InitialNamesAccepted|the initial names have been accepted"), true, "", false},
		{cond("NamesAccepted|True|NoConflicts|", "Established|False|Installing|the initial names have not been accepted"), false,
			"Established=False (Installing): the initial names have not been accepted", false},
		{cond("NamesAccepted|False|KindConflict|\"Widget\" is already in use", "Established|False|NotAccepted|not all names are accepted"), false,
			"NamesAccepted=False (KindConflict): \"Widget\" is already in use", true},
	}
	for i, tt := range tests {
		established, why, refused := crdEstablished(tt.u)
		if established != tt.established || why != tt.why || refused != tt.refused {
			t.Errorf("%d: got %v %q %v, want %v %q %v", i, established, why, refused, tt.established, tt.why, tt.refused)
		}
	}
}
