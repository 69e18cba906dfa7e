package e2e

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// The model TestLinearizability checks its history against: every ConfigMap name is a register
// holding nothing (absent) or a value and its resourceVersion. Values are unique per write, so
// a read that returns one names the write it saw.

// kvOp is what a client asked the API.
type kvOp uint8

const (
	opCreate kvOp = iota // POST: fails with AlreadyExists if the name is taken
	opUpdate             // PUT with metadata.resourceVersion: fails with Conflict if it differs
	opGet                // GET with resourceVersion "": a quorum read
	opDelete             // DELETE without preconditions: fails with NotFound if absent
)

func (o kvOp) String() string {
	return [...]string{"create", "update", "get", "delete"}[o]
}

// kvResult is what the API answered. resUnknown is a request whose effect we cannot know (a
// timeout, a reset connection, a 5xx): it may or may not have taken effect, at any time after
// it was sent; the history gives it a return time after every other operation.
type kvResult uint8

const (
	resOK kvResult = iota
	resExists
	resConflict
	resNotFound
	resUnknown
)

func (r kvResult) String() string {
	return [...]string{"ok", "exists", "conflict", "not-found", "unknown"}[r]
}

// kvInput is one request: data is the value a create or update writes, rv the
// resourceVersion an update is conditional on.
type kvInput struct {
	Op   kvOp
	Key  string
	Data string
	RV   string
}

// kvOutput is one answer: data and rv of the object returned (a get, or the object a create
// or update wrote).
type kvOutput struct {
	Result kvResult
	Data   string
	RV     string
}

// rvUnseen is the resourceVersion of a write whose answer was lost: the server gave it one no
// client has seen. No client can name it in an update until a read has returned it, and a read
// that returns it replaces rvUnseen with the real value.
const rvUnseen = "?"

// kvState is one register: absent, or data at resourceVersion rv.
type kvState struct {
	Exists bool
	Data   string
	RV     string
}

var absent = kvState{}

// kvStep is the sequential specification of one key.
func kvStep(state, input, output any) (bool, any) {
	s, in, out := state.(kvState), input.(kvInput), output.(kvOutput)
	switch in.Op {
	case opCreate:
		switch out.Result {
		case resOK:
			return !s.Exists, kvState{Exists: true, Data: in.Data, RV: out.RV}
		case resExists:
			return s.Exists, s
		case resUnknown:
			if !s.Exists {
				return true, kvState{Exists: true, Data: in.Data, RV: rvUnseen}
			}
			return true, s
		}
	case opUpdate:
		// rvUnseen never equals a resourceVersion a client sent (see rvUnseen).
		matches := s.Exists && s.RV == in.RV
		switch out.Result {
		case resOK:
			return matches, kvState{Exists: true, Data: in.Data, RV: out.RV}
		case resConflict:
			return s.Exists && !matches, s
		case resNotFound:
			return !s.Exists, s
		case resUnknown:
			if matches {
				return true, kvState{Exists: true, Data: in.Data, RV: rvUnseen}
			}
			return true, s
		}
	case opGet:
		switch out.Result {
		case resOK:
			return s.Exists && s.Data == out.Data && (s.RV == out.RV || s.RV == rvUnseen),
				kvState{Exists: true, Data: out.Data, RV: out.RV}
		case resNotFound:
			return !s.Exists, s
		case resUnknown:
			return true, s
		}
	case opDelete:
		switch out.Result {
		case resOK:
			return s.Exists, absent
		case resNotFound:
			return !s.Exists, s
		case resUnknown:
			return true, absent
		}
	}
	return false, s
}

// kvModel is the porcupine model: one register per key, checked key by key.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return absent },
	Step: kvStep,
	Hash: func(state any) uint64 {
		s := state.(kvState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%t\x00%s\x00%s", s.Exists, s.Data, s.RV)
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		var b strings.Builder
		b.WriteString(in.Op.String() + "(" + in.Key)
		if in.Data != "" {
			b.WriteString(", " + in.Data)
		}
		if in.RV != "" {
			b.WriteString(", rv=" + in.RV)
		}
		b.WriteString(") -> " + out.Result.String())
		if out.Result == resOK && (out.Data != "" || out.RV != "") {
			if in.Op == opGet {
				b.WriteString(" " + out.Data)
			}
			b.WriteString(" rv=" + out.RV)
		}
		return b.String()
	},
	DescribeState: func(state any) string {
		s := state.(kvState)
		if !s.Exists {
			return "absent"
		}
		return s.Data + " @" + s.RV
	},
}

// unknownReturn is the return time of operations whose effect is unknown: after everything
// else, so the checker may place them anywhere after their call, or (at the end) nowhere.
const unknownReturn = math.MaxInt64 / 2

// The model itself, on histories written by hand.
func TestLinearizabilityModel(t *testing.T) {
	type op struct {
		call, ret int64
		in        kvInput
		out       kvOutput
	}
	create := func(k, data string) kvInput { return kvInput{Op: opCreate, Key: k, Data: data} }
	update := func(k, data, rv string) kvInput { return kvInput{Op: opUpdate, Key: k, Data: data, RV: rv} }
	get := kvInput{Op: opGet, Key: "a"}
	del := kvInput{Op: opDelete, Key: "a"}
	ok := func(data, rv string) kvOutput { return kvOutput{Result: resOK, Data: data, RV: rv} }
	res := func(r kvResult) kvOutput { return kvOutput{Result: r} }
	const never = unknownReturn
	cases := []struct {
		name string
		ops  []op
		want bool
	}{
		{"sequential create, get, update, get, delete, get", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{2, 3, get, ok("x", "10")},
			{4, 5, update("a", "y", "10"), ok("", "11")},
			{6, 7, get, ok("y", "11")},
			{8, 9, del, res(resOK)},
			{10, 11, get, res(resNotFound)},
		}, true},
		{"stale read after an acknowledged update", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{2, 3, update("a", "y", "10"), ok("", "11")},
			{4, 5, get, ok("x", "10")},
		}, false},
		{"a read concurrent with the update may see either value", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{2, 6, update("a", "y", "10"), ok("", "11")},
			{3, 4, get, ok("x", "10")},
			{4, 5, get, ok("y", "11")},
		}, true},
		{"reads go backwards", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{2, 9, update("a", "y", "10"), ok("", "11")},
			{3, 4, get, ok("y", "11")},
			{5, 6, get, ok("x", "10")},
		}, false},
		{"lost update: two updates from the same version both succeed", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{2, 5, update("a", "y", "10"), ok("", "11")},
			{3, 6, update("a", "z", "10"), ok("", "12")},
		}, false},
		{"conflict although the version matched", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{2, 3, update("a", "y", "10"), res(resConflict)},
		}, false},
		{"conflict with a stale version", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{2, 3, update("a", "y", "10"), ok("", "11")},
			{4, 5, update("a", "z", "10"), res(resConflict)},
		}, true},
		{"create twice", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{2, 3, create("a", "y"), ok("", "11")},
		}, false},
		{"delete of an existing object answers not found", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{2, 3, del, res(resNotFound)},
		}, false},
		{"a create with a lost answer is seen later", []op{
			{0, never, create("a", "x"), res(resUnknown)},
			{2, 3, get, res(resNotFound)},
			{4, 5, get, ok("x", "10")},
			{6, 7, update("a", "y", "10"), ok("", "11")},
		}, true},
		{"a create with a lost answer never happened", []op{
			{0, never, create("a", "x"), res(resUnknown)},
			{2, 3, get, res(resNotFound)},
			{4, 5, create("a", "y"), ok("", "10")},
			{6, 7, get, ok("y", "10")},
		}, true},
		{"a value appears, then disappears without a delete", []op{
			{0, never, create("a", "x"), res(resUnknown)},
			{2, 3, get, ok("x", "10")},
			{4, 5, get, res(resNotFound)},
		}, false},
		{"an update with a lost answer: nobody knows its version, so updates from the old one conflict", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{2, never, update("a", "y", "10"), res(resUnknown)},
			{3, 4, get, ok("y", "11")},
			{5, 6, update("a", "z", "10"), res(resConflict)},
			{7, 8, update("a", "w", "11"), ok("", "12")},
		}, true},
		{"a read invents a value", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{2, never, update("a", "y", "10"), res(resUnknown)},
			{3, 4, get, ok("q", "11")},
		}, false},
		{"keys are independent", []op{
			{0, 1, create("a", "x"), ok("", "10")},
			{0, 1, create("b", "x"), ok("", "11")},
			{2, 3, get, ok("x", "10")},
			{2, 3, kvInput{Op: opGet, Key: "b"}, ok("x", "11")},
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var history []porcupine.Operation
			for i, o := range tc.ops {
				history = append(history, porcupine.Operation{ClientId: i, Call: o.call, Return: o.ret, Input: o.in, Output: o.out})
			}
			if got := porcupine.CheckOperations(kvModel, history); got != tc.want {
				t.Errorf("linearizable = %v, want %v", got, tc.want)
			}
		})
	}
}
