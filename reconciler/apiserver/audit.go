package apiserver

import (
	"fmt"
	"os"
	"strings"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/flotilla-dev/flotilla/reconciler/authz/rbac"
)

// AuditConfig is the audit log, written as kube-apiserver writes it (--audit-log-* and
// --audit-policy-file, through k8s.io/apiserver's AuditOptions): JSON events of
// audit.k8s.io/v1, one a line.
type AuditConfig struct {
	// Path is the log file ("-": standard output; "": no audit log).
	Path string
	// MaxSizeMB is the size in megabytes at which the file is rotated (0: never);
	// MaxBackups is how many rotated files are kept (0: all).
	MaxSizeMB, MaxBackups int
	// PolicyFile is an audit.k8s.io/v1 Policy; DefaultAuditPolicy when empty. A policy that
	// asks for the bodies of Secrets (level Request or RequestResponse) is refused.
	PolicyFile string
}

// defaultAuditPolicyYAML logs every request at Metadata (who, what, when, the answer's
// code: never a body), once the request is answered (no RequestReceived events), except
// the reads of flotilla's own components and health checks. A site reads itself about once a
// second while nothing happens (heartbeats, the leaders' records, the kubernetes Service,
// discovery): logged, that was half of what an idle host wrote to disk (docs/endurance.md).
// What the components write is logged. %s is replaced by the list of component users.
const defaultAuditPolicyYAML = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: [%s]
  verbs: [get, list, watch]
- level: None
  userGroups: [system:nodes]
  verbs: [get, list, watch]
- level: None
  nonResourceURLs: [/healthz*, /readyz*, /livez*, /version]
- level: Metadata
`

// defaultAuditPolicy returns the default policy as YAML.
func defaultAuditPolicy() []byte {
	users := []string{user.APIServerUser, rbac.ControllerManagerUser}
	for _, name := range rbac.ControllerNames() {
		users = append(users, rbac.ControllerUser(name))
	}
	return fmt.Appendf(nil, defaultAuditPolicyYAML, strings.Join(users, ", "))
}

// DefaultAuditPolicy returns the policy of an audit log without a policy file.
func DefaultAuditPolicy() *auditinternal.Policy {
	p, err := policy.LoadPolicyFromBytes(defaultAuditPolicy())
	if err != nil {
		panic(err)
	}
	return p
}

// applyAudit configures the audit log of gc (nothing when c.Path is empty). The backend is
// k8s.io/apiserver's log backend with its rotation (lumberjack); the policy is the file's,
// checked by CheckAuditPolicySecrets, or DefaultAuditPolicy, and in either case Secrets are
// never audited above Metadata.
func applyAudit(gc *genericapiserver.Config, c AuditConfig) error {
	if c.Path == "" {
		return nil
	}
	var p *auditinternal.Policy
	opts := genericoptions.NewAuditOptions()
	opts.LogOptions.Path = c.Path
	opts.LogOptions.MaxSize = c.MaxSizeMB
	opts.LogOptions.MaxBackups = c.MaxBackups
	if c.PolicyFile != "" {
		var err error
		if p, err = policy.LoadPolicyFromFile(c.PolicyFile); err != nil {
			return fmt.Errorf("--audit-policy-file: %w", err)
		}
		if err := CheckAuditPolicySecrets(p); err != nil {
			return fmt.Errorf("--audit-policy-file %s: %w", c.PolicyFile, err)
		}
		opts.PolicyFile = c.PolicyFile
	} else {
		// The options build the log backend only with a policy file: give them the
		// default's, for as long as they read it.
		p = DefaultAuditPolicy()
		f, err := os.CreateTemp("", "flotilla-audit-policy-*.yaml")
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		defer func() { _ = os.Remove(f.Name()) }()
		_, err = f.Write(defaultAuditPolicy())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		opts.PolicyFile = f.Name()
	}
	if errs := opts.Validate(); len(errs) > 0 {
		return fmt.Errorf("audit log: %v", errs)
	}
	if err := opts.ApplyTo(gc); err != nil {
		return fmt.Errorf("audit log %s: %w", c.Path, err)
	}
	gc.AuditPolicyRuleEvaluator = secretsAtMostMetadata{policy.NewPolicyRuleEvaluator(p)}
	return nil
}

// secretsAtMostMetadata caps the audit level of requests for Secrets at Metadata, whatever
// rule matched: a Secret's data never reaches the audit log.
type secretsAtMostMetadata struct{ audit.PolicyRuleEvaluator }

func (e secretsAtMostMetadata) EvaluatePolicyRule(attrs authorizer.Attributes) audit.RequestAuditConfig {
	c := e.PolicyRuleEvaluator.EvaluatePolicyRule(attrs)
	if attrs.IsResourceRequest() && attrs.GetAPIGroup() == "" && attrs.GetResource() == "secrets" &&
		c.Level.GreaterOrEqual(auditinternal.LevelRequest) {
		c.Level = auditinternal.LevelMetadata
	}
	return c
}

// CheckAuditPolicySecrets refuses a policy with a rule that may log the body of a request
// for Secrets (level Request or RequestResponse) unless an earlier rule takes every Secret
// request first. The error names the rule.
func CheckAuditPolicySecrets(p *auditinternal.Policy) error {
	for i, r := range p.Rules {
		if r.Level.GreaterOrEqual(auditinternal.LevelRequest) && ruleMayMatchSecrets(&r) {
			return fmt.Errorf("rule %d (%s) would log the bodies of Secrets at level %s: Secrets are audited at Metadata at most; "+
				"add before it a rule such as `- level: Metadata\n  resources: [{group: \"\", resources: [secrets]}]`",
				i+1, describeAuditRule(&r), r.Level)
		}
		if ruleMatchesAllSecrets(&r) {
			return nil
		}
	}
	return nil
}

// ruleMayMatchSecrets says whether some request for Secrets (in group "") may match r.
func ruleMayMatchSecrets(r *auditinternal.PolicyRule) bool {
	if len(r.Namespaces) == 0 && len(r.Resources) == 0 {
		return len(r.NonResourceURLs) == 0
	}
	if len(r.Resources) == 0 {
		return true
	}
	for _, gr := range r.Resources {
		if gr.Group != "" && gr.Group != "*" {
			continue
		}
		if len(gr.Resources) == 0 {
			return true
		}
		for _, res := range gr.Resources {
			// ("*/sub" matches only subresources, which Secrets have none of.)
			if res == "*" || res == "secrets" || strings.HasPrefix(res, "secrets/") {
				return true
			}
		}
	}
	return false
}

// ruleMatchesAllSecrets says whether every request for Secrets matches r (so that no later
// rule sees one).
func ruleMatchesAllSecrets(r *auditinternal.PolicyRule) bool {
	if len(r.Users) > 0 || len(r.UserGroups) > 0 || len(r.Verbs) > 0 || len(r.Namespaces) > 0 {
		return false
	}
	if len(r.Resources) == 0 {
		return len(r.NonResourceURLs) == 0
	}
	for _, gr := range r.Resources {
		if (gr.Group != "" && gr.Group != "*") || len(gr.ResourceNames) > 0 {
			continue
		}
		if len(gr.Resources) == 0 {
			return true
		}
		for _, res := range gr.Resources {
			if res == "*" || res == "secrets" {
				return true
			}
		}
	}
	return false
}

// describeAuditRule summarizes a rule for an error message.
func describeAuditRule(r *auditinternal.PolicyRule) string {
	var parts []string
	if len(r.Resources) == 0 {
		parts = append(parts, "all resources")
	}
	for _, gr := range r.Resources {
		res := "*"
		if len(gr.Resources) > 0 {
			res = strings.Join(gr.Resources, ",")
		}
		parts = append(parts, fmt.Sprintf("group %q resources %s", gr.Group, res))
	}
	for _, f := range []struct {
		name string
		list []string
	}{{"users", r.Users}, {"userGroups", r.UserGroups}, {"verbs", r.Verbs}, {"namespaces", r.Namespaces}} {
		if len(f.list) > 0 {
			parts = append(parts, f.name+" "+strings.Join(f.list, ","))
		}
	}
	return strings.Join(parts, ", ")
}
