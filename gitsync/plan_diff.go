package gitsync

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// FieldChange is one field that differs between the live object and what applying git
// would make of it. Old and New are compact JSON; empty means the field is absent. The
// values of a Secret are never shown: they read PlanRedacted (see DiffObjects).
type FieldChange struct {
	Path string `json:"path"`
	Old  string `json:"old,omitempty"`
	New  string `json:"new,omitempty"`
}

// planNoiseMetadata are metadata fields the server maintains: they change on every write and
// say nothing about what git changes.
var planNoiseMetadata = []string{"managedFields", "resourceVersion", "generation", "uid", "creationTimestamp",
	"selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"}

const planLastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// planListKeys are the fields that identify an planItem of a list, in the order tried (the
// strategic-merge keys of the core kinds): items are matched by key, not position, so an
// inserted container or env var is one change, not a shift of every later one.
var planListKeys = []string{"name", "containerPort", "port", "mountPath", "devicePath", "key", "ip", "type", "topologyKey"}

// PlanRedacted stands for a value of a Secret in a plan: a plan may be posted where
// anyone reading the pull request sees it.
const PlanRedacted = "(value changed)"

// DiffObjects returns the fields that differ between live and planned (unstructured
// objects; live nil for a create), ignoring status and the metadata the server maintains
// (managedFields, resourceVersion, generation, uid, creationTimestamp...). Maps are compared
// key by key and lists planItem by planItem (matched by name or another key when every planItem has
// one), down to the leaves; the result is sorted as the fields appear.
//
// For a core/v1 Secret, every change under data or stringData, and to the
// kubectl.kubernetes.io/last-applied-configuration annotation, shows PlanRedacted in place of
// the old and new values (a key added has only a new value, a key removed only an old one),
// one change per key when a whole map is set or removed.
func DiffObjects(live, planned map[string]any) []FieldChange {
	var out []FieldChange
	planDiffValue("", planStripNoise(live), planStripNoise(planned), &out)
	if planIsSecret(live) || planIsSecret(planned) {
		out = planRedactSecret(out)
	}
	return out
}

// planIsSecret reports whether o is a core/v1 Secret.
func planIsSecret(o map[string]any) bool {
	return o != nil && o["apiVersion"] == "v1" && o["kind"] == "Secret"
}

// planSecretMaps are the fields of a Secret whose values a plan never shows.
var planSecretMaps = []string{"data", "stringData"}

// planRedactSecret replaces the values of a Secret's changes under planSecretMaps, and of its
// last-applied annotation, with PlanRedacted.
func planRedactSecret(cs []FieldChange) []FieldChange {
	lastApplied := planJoinKey("metadata.annotations", planLastAppliedAnnotation)
	out := make([]FieldChange, 0, len(cs))
	for _, c := range cs {
		switch {
		case slices.Contains(planSecretMaps, c.Path):
			out = append(out, planRedactWhole(c)...)
		case c.Path == lastApplied || slices.ContainsFunc(planSecretMaps, func(m string) bool { return planUnder(c.Path, m) }):
			out = append(out, FieldChange{Path: c.Path, Old: planRedactValue(c.Old), New: planRedactValue(c.New)})
		default:
			out = append(out, c)
		}
	}
	return out
}

// planUnder reports whether path is a field under field, as planJoinKey writes it:
// "data.KEY", or `data["KEY.WITH.DOTS"]`.
func planUnder(path, field string) bool {
	rest, ok := strings.CutPrefix(path, field)
	return ok && (strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, "["))
}

// planRedactValue is PlanRedacted for a value, "" for an absent one.
func planRedactValue(v string) string {
	if v == "" {
		return ""
	}
	return PlanRedacted
}

// planRedactWhole splits the change of a whole data map (set where it was absent or null, or
// the reverse) into one redacted change per key. A side that is not a map and holds
// something other than null is shown as one redacted change of the whole field.
func planRedactWhole(c FieldChange) []FieldChange {
	oldMap, oldIsMap := planJSONMap(c.Old)
	newMap, newIsMap := planJSONMap(c.New)
	var out []FieldChange
	whole := FieldChange{Path: c.Path}
	if !oldIsMap && c.Old != "null" {
		whole.Old = planRedactValue(c.Old)
	}
	if !newIsMap && c.New != "null" {
		whole.New = planRedactValue(c.New)
	}
	if whole.Old != "" || whole.New != "" {
		out = append(out, whole)
	}
	keys := make([]string, 0, len(oldMap)+len(newMap))
	for k := range oldMap {
		keys = append(keys, k)
	}
	for k := range newMap {
		if _, ok := oldMap[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		ch := FieldChange{Path: planJoinKey(c.Path, k)}
		if _, ok := oldMap[k]; ok {
			ch.Old = PlanRedacted
		}
		if _, ok := newMap[k]; ok {
			ch.New = PlanRedacted
		}
		out = append(out, ch)
	}
	if len(out) == 0 {
		// Only null and empty maps: nothing secret to hide.
		return []FieldChange{c}
	}
	return out
}

// planJSONMap decodes a JSON object; ok is false for anything else.
func planJSONMap(v string) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &m); err != nil || m == nil {
		return nil, false
	}
	return m, true
}

func planStripNoise(o map[string]any) map[string]any {
	if o == nil {
		return nil
	}
	c := make(map[string]any, len(o))
	for k, v := range o {
		if k != "status" {
			c[k] = v
		}
	}
	md, ok := o["metadata"].(map[string]any)
	if !ok {
		return c
	}
	m := make(map[string]any, len(md))
	for k, v := range md {
		if !slices.Contains(planNoiseMetadata, k) {
			m[k] = v
		}
	}
	if ann, ok := m["annotations"].(map[string]any); ok {
		a := make(map[string]any, len(ann))
		for k, v := range ann {
			if k != planLastAppliedAnnotation {
				a[k] = v
			}
		}
		m["annotations"] = a
	}
	// Absent and empty labels/annotations mean the same to the API.
	for _, k := range []string{"annotations", "labels"} {
		if v, ok := m[k].(map[string]any); ok && len(v) == 0 {
			delete(m, k)
		}
	}
	c["metadata"] = m
	return c
}

const planAbsent = "\x00absent"

// planDiffValue appends the changes between a and b (either may be planAbsent) under path.
func planDiffValue(path string, a, b any, out *[]FieldChange) {
	if reflect.DeepEqual(a, b) {
		return
	}
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	switch {
	case (aIsMap || a == planAbsent) && (bIsMap || b == planAbsent) && (len(am) > 0 || len(bm) > 0):
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, planCompareKeys)
		for _, k := range keys {
			av, ok := am[k]
			if !ok {
				av = planAbsent
			}
			bv, ok := bm[k]
			if !ok {
				bv = planAbsent
			}
			planDiffValue(planJoinKey(path, k), av, bv, out)
		}
	case (aIsList || a == planAbsent) && (bIsList || b == planAbsent) && (len(al) > 0 || len(bl) > 0) && !planScalarList(al) && !planScalarList(bl):
		planDiffList(path, al, bl, out)
	default:
		*out = append(*out, FieldChange{Path: path, Old: planJsonText(a), New: planJsonText(b)})
	}
}

// planDiffList matches items by the first of planListKeys that every planItem of both lists has,
// with distinct values, else by position.
func planDiffList(path string, a, b []any, out *[]FieldChange) {
	key := planListKey(a, b)
	if key == "" {
		for i := range max(len(a), len(b)) {
			var av, bv any = planAbsent, planAbsent
			if i < len(a) {
				av = a[i]
			}
			if i < len(b) {
				bv = b[i]
			}
			planDiffValue(fmt.Sprintf("%s[%d]", path, i), av, bv, out)
		}
		return
	}
	id := func(v any) string { return fmt.Sprint(v.(map[string]any)[key]) }
	inB := map[string]any{}
	for _, v := range b {
		inB[id(v)] = v
	}
	seen := map[string]bool{}
	// Items of a in their order (changed or removed), then items only in b (added).
	for _, v := range a {
		k := id(v)
		seen[k] = true
		bv, ok := inB[k]
		if !ok {
			bv = planAbsent
		}
		planDiffValue(fmt.Sprintf("%s[%s=%s]", path, key, k), v, bv, out)
	}
	for _, v := range b {
		if k := id(v); !seen[k] {
			planDiffValue(fmt.Sprintf("%s[%s=%s]", path, key, k), planAbsent, v, out)
		}
	}
}

func planListKey(a, b []any) string {
	for _, key := range planListKeys {
		if planHasUniqueKey(a, key) && planHasUniqueKey(b, key) {
			return key
		}
	}
	return ""
}

func planHasUniqueKey(l []any, key string) bool {
	seen := map[string]bool{}
	for _, v := range l {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		k, ok := m[key]
		if !ok {
			return false
		}
		switch k.(type) {
		case map[string]any, []any:
			return false
		}
		s := fmt.Sprint(k)
		if seen[s] {
			return false
		}
		seen[s] = true
	}
	return true
}

// scalarList: a list of scalars (args, command, finalizers) reads best as one value.
func planScalarList(l []any) bool {
	for _, v := range l {
		switch v.(type) {
		case map[string]any, []any:
			return false
		}
	}
	return len(l) > 0
}

// planCompareKeys puts apiVersion, kind, metadata, spec first (as objects are usually
// written), the rest alphabetically.
func planCompareKeys(x, y string) int {
	rank := func(k string) int {
		if i := slices.Index([]string{"apiVersion", "kind", "metadata", "spec"}, k); i >= 0 {
			return i
		}
		return 4
	}
	if rx, ry := rank(x), rank(y); rx != ry {
		return rx - ry
	}
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

var planPlainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

func planJoinKey(path, k string) string {
	if !planPlainKey.MatchString(k) {
		return path + "[" + strconv.Quote(k) + "]"
	}
	if path == "" {
		return k
	}
	return path + "." + k
}

func planJsonText(v any) string {
	if v == planAbsent {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
