package policies

import (
	"fmt"
	"io/fs"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/openapi"
)

// CheckPolicy returns the problems of a policy's CEL expressions, each as "FIELD: PROBLEM":
//
//   - expressions that do not compile in the environment the API server evaluates them in
//     (object and params dynamically typed): syntax errors, unknown variables or functions,
//     a validation or match condition that is not a bool. Such a policy is accepted by the
//     API, and denies (failurePolicy Fail) or ignores (Ignore) every request it matches;
//   - type errors against the schemas of the built-in kinds the policy matches (e.g. a
//     field a Deployment does not have), as the API server reports them in the policy's
//     status.typeChecking.
//
// mapper maps the matched resources to kinds.
func CheckPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy, mapper meta.RESTMapper) []string {
	var problems []string
	add := func(path *field.Path, err *apiservercel.Error) {
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s", path, err.Detail))
		}
	}

	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return []string{err.Error()}
	}
	opts := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	messageOpts := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil}
	spec := field.NewPath("spec")
	for i, v := range p.Spec.Variables {
		res := compiler.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, opts, environment.StoredExpressions)
		add(spec.Child("variables").Index(i).Child("expression"), res.Error)
	}
	for i := range p.Spec.MatchConditions {
		res := compiler.CompileCELExpression((*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i]), opts, environment.StoredExpressions)
		add(spec.Child("matchConditions").Index(i).Child("expression"), res.Error)
	}
	for i, v := range p.Spec.Validations {
		path := spec.Child("validations").Index(i)
		res := compiler.CompileCELExpression(&validating.ValidationCondition{Expression: v.Expression}, opts, environment.StoredExpressions)
		add(path.Child("expression"), res.Error)
		if v.MessageExpression != "" {
			res := compiler.CompileCELExpression(&validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}, messageOpts, environment.StoredExpressions)
			add(path.Child("messageExpression"), res.Error)
		}
	}
	for i, a := range p.Spec.AuditAnnotations {
		res := compiler.CompileCELExpression(&validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}, opts, environment.StoredExpressions)
		add(spec.Child("auditAnnotations").Index(i).Child("valueExpression"), res.Error)
	}
	if len(problems) > 0 {
		// The typed check would repeat these.
		return problems
	}

	checker := &validating.TypeChecker{SchemaResolver: builtinSchemas(), RestMapper: mapper}
	for _, w := range checker.Check(p) {
		problems = append(problems, fmt.Sprintf("%s: %s", w.FieldRef, strings.TrimSpace(w.Warning)))
	}
	return problems
}

// builtinSchemas resolves the OpenAPI schemas of the built-in kinds from the API server's
// generated definitions.
func builtinSchemas() resolver.SchemaResolver {
	return resolver.NewDefinitionsSchemaResolver(openapi.Definitions(), newScheme())
}

// typeCheck checks every ValidatingAdmissionPolicy of the suite's context files.
func (s *Suite) typeCheck(fsys fs.FS, mapper meta.RESTMapper) error {
	scheme := newScheme()
	var problems []string
	for _, f := range s.Context {
		objs, err := readObjects(fsys, f)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if o.GroupVersionKind() != vapGVK {
				continue
			}
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := fromUnstructured(scheme, o, p); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", f, err))
				continue
			}
			for _, problem := range CheckPolicy(p, mapper) {
				problems = append(problems, fmt.Sprintf("%s: ValidatingAdmissionPolicy %s: %s", f, p.Name, problem))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return nil
}
