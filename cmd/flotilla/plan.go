package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/policies"
)

type planOptions struct {
	kubeconfig string
	source     string
	path       string
	output     string
	detailed   bool
	// policies is the built-in policy set evaluated offline (the site's --policies).
	policies string
	// limits bound the render as the agent's --git-* flags bound gitsync's.
	limits gitsync.Limits
}

func newPlanCommand() *cobra.Command {
	o := planOptions{limits: gitsync.DefaultLimits()}
	cmd := &cobra.Command{
		Use:   "plan [REPO_DIR]",
		Short: "Show what gitsync would create, update and delete if REPO_DIR were the applied revision",
		Long: `plan renders REPO_DIR (default .) at --path exactly as gitsync does. With --kubeconfig it
server-side dry-runs every object as gitsync would apply it (nothing on the server changes)
and compares the result with the live object; objects of the GitSource's inventory that are
no longer rendered are listed as delete (or keep, with the reason). The warnings the API
answers to an object's dry-run (e.g. Pod Security Admission's for a workload whose pods it
would refuse) are listed as warnings naming the object.

Without --kubeconfig (offline, e.g. a CI job that cannot reach the site) it validates every
object as flotilla's API would, without a cluster: decoded strictly (a field the kind does
not declare is an error), defaulted and checked by the API's own validation; a kind that
flotilla does not serve and no CustomResourceDefinition of the revision defines is invalid.
It lists the objects but compares nothing; what depends on the site (other objects, its
service CIDR and node port range, admission webhooks) is checked only with --kubeconfig.

Admission policies: ValidatingAdmissionPolicies decide whether the API accepts an object. With
--kubeconfig the dry-run goes through the site's policies. Offline, plan evaluates the
policies, bindings and params of the revision itself and those of the built-in set named by
--policies (give the site's value) with the API server's own admission plugin and CEL
libraries: an object a policy denies is invalid with the same message the GitSource status
shows (naming the policy), and a Warn action is a warning naming the object. The policies
that look across objects (Ingress hosts, budgets of critical Deployments) count the
revision's own objects. Pod Security admission runs first, as on the site: the levels the
revision's Namespaces label, else the site default (baseline).

Scheduling: with --kubeconfig, when the revision creates, updates or deletes workloads
(Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, Pods), plan runs flotilla's own
scheduler on a snapshot of the site's Nodes and pods, as the site's scheduler would once the
revision is applied: the pods of the workloads the revision replaces or deletes are taken
away (a workload whose pod template does not change only scales and keeps its pods), then
the revision's pods, built from their templates with their priority, are placed one after
the other, highest priority first. It reports per workload how many pods would fit and why
the others would stay Pending, in the scheduler's words (e.g. "0/3 nodes are available: 3
Insufficient memory."), and per node the cpu, memory and pods requested before and after. A
credential that may not list Nodes, Pods, Namespaces, claims, volumes, PriorityClasses,
StorageClasses or ReplicaSets gets a warning "scheduling not simulated", never a failure.

Custom resources whose CustomResourceDefinition is in the same revision are checked against
that definition as gitsync checks them (OpenAPI schema, defaults, CEL rules), with or
without --kubeconfig: one that violates it is invalid and the plan names the field; a valid
one is a create until the server has it.

The render is gitsync's: only files of the repository are read (a URL, a remote base, a helm
chart or a plugin other than kustomize's builtin ones is an error naming the kustomization
file and the field), and --git-max-objects, --git-max-object-size and --git-render-timeout
bound it as they bound the agent's (give the agent's values to see what the site would
refuse); the other --git-* flags concern fetching and do not apply here.

Exit status: 1 when rendering fails or an object is invalid; with --detailed-exitcode, 1
also when pods of the revision would stay Pending, else 2 when the plan is valid and changes
something, 0 when it changes nothing.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			repo := "."
			if len(args) == 1 {
				repo = args[0]
			}
			code, err := runPlan(cmd.Context(), o, repo, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if code != 0 {
				// main maps every error to 1; 2 ("valid, with changes") is not an error.
				os.Exit(code)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the site to compare with; without it the plan renders and validates offline")
	f.StringVar(&o.source, "source", gitsync.DefaultPlanSource, "GitSource NAMESPACE/NAME whose inventory, path and label the plan uses")
	f.StringVar(&o.path, "path", "", "directory in the repository to render (default: the GitSource's spec.path, offline the root)")
	f.StringVar(&o.output, "output", "text", "output format: text, markdown (for a pull-request comment) or json")
	f.StringVar(&o.policies, "policies", policies.SetNone, "offline: the built-in admission policy set the site installs (its agents' --policies: none, baseline or restricted), evaluated with the revision's own policies; with --kubeconfig the site's policies are used")
	f.BoolVar(&o.detailed, "detailed-exitcode", false, "exit 1 when pods would stay Pending, 2 when the plan is valid and has changes, 0 when it has none")
	addGitLimitFlags(f, &o.limits)
	return cmd
}

// runPlan writes the plan to out and returns the exit status; errors are for failures
// to render or to reach the API (exit 1), an invalid object (or, with --detailed-exitcode,
// a pod that would stay Pending) returns an error after the plan is written.
func runPlan(ctx context.Context, o planOptions, repo string, out io.Writer) (int, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	switch o.output {
	case "text", "markdown", "json":
	default:
		return 1, fmt.Errorf("--output %q: want text, markdown or json", o.output)
	}
	var (
		p   *gitsync.Plan
		err error
	)
	if o.kubeconfig == "" {
		p, err = gitsync.PlanOffline(repo, o.path, o.limits, o.policies)
	} else {
		var a *gitsync.Applier
		if a, err = planApplier(o.kubeconfig); err != nil {
			return 1, err
		}
		p, err = a.Plan(ctx, gitsync.PlanOptions{RepoDir: repo, Path: o.path, Source: o.source, Limits: o.limits})
	}
	if err != nil {
		return 1, fmt.Errorf("plan %s: %w", repo, err)
	}
	switch o.output {
	case "json":
		b, err := p.JSON()
		if err != nil {
			return 1, err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		if err != nil {
			return 1, err
		}
	case "markdown":
		if _, err := io.WriteString(out, p.Markdown()); err != nil {
			return 1, err
		}
	default:
		if _, err := io.WriteString(out, p.Text()); err != nil {
			return 1, err
		}
	}
	return planExit(p, o.detailed)
}

// planExit is the exit status of a plan written out (see Plan.ExitCode), with the error
// main prints for 1.
func planExit(p *gitsync.Plan, detailed bool) (int, error) {
	code := p.ExitCode(detailed)
	switch {
	case code != 1:
		return code, nil
	case p.Counts().Invalid > 0:
		return 1, fmt.Errorf("%d object(s) failed validation: gitsync would apply nothing of this revision; fix them", p.Counts().Invalid)
	default:
		return 1, fmt.Errorf("%d pod(s) of this revision would stay Pending (see Scheduling)", p.Pending())
	}
}

func planApplier(kubeconfig string) (*gitsync.Applier, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	// One dry-run and one get per object: client-go's default 5 QPS would make a large
	// repository take minutes.
	cfg.QPS, cfg.Burst = 50, 100
	// The API's warnings for an object (e.g. Pod Security Admission's) become plan warnings.
	gitsync.CollectWarnings(cfg)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	return &gitsync.Applier{Dynamic: dyn, Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}
