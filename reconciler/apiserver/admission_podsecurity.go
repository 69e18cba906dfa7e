package apiserver

import (
	"context"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	psadmission "k8s.io/pod-security-admission/admission"
	psconfig "k8s.io/pod-security-admission/admission/api"
	psload "k8s.io/pod-security-admission/admission/api/load"
	psapi "k8s.io/pod-security-admission/api"
	psmetrics "k8s.io/pod-security-admission/metrics"
	pspolicy "k8s.io/pod-security-admission/policy"
)

// PodSecurityPluginName is the admission plugin's upstream name.
const PodSecurityPluginName = "PodSecurity"

// DefaultPodSecurityLevel is the Pod Security Standards level enforced, and warned about, in
// namespaces without pod-security.kubernetes.io labels when Config.PodSecurityDefault is empty.
const DefaultPodSecurityLevel = string(psapi.LevelBaseline)

// PodSecurityExemptNamespaces are the namespaces Pod Security admission never checks:
// flotilla's own, whose pods may need the host.
var PodSecurityExemptNamespaces = []string{metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}

// systemNamespaceLabels are the labels a system namespace is created with: kube-system says
// that it is privileged (it is exempt anyway), so that kubectl get ns --show-labels shows it.
func systemNamespaceLabels(name string) map[string]string {
	if name == metav1.NamespaceSystem {
		return map[string]string{psapi.EnforceLevelLabel: string(psapi.LevelPrivileged)}
	}
	return nil
}

// validatePodSecurityLevel checks a site default level: privileged, baseline or restricted.
func validatePodSecurityLevel(level string) error {
	if _, err := psapi.ParseLevel(level); err != nil {
		return fmt.Errorf("pod security level %q: use %s, %s or %s", level, psapi.LevelPrivileged, psapi.LevelBaseline, psapi.LevelRestricted)
	}
	return nil
}

// podSecurityPlugin is the PodSecurity admission plugin of kube-apiserver: the Pod Security
// Standards of k8s.io/pod-security-admission applied per namespace from the labels
// pod-security.kubernetes.io/enforce, audit and warn (and their -version labels).
//
//   - A pod that violates its namespace's enforce level is refused with the library's message
//     (pods "x" is forbidden: violates PodSecurity "baseline:latest": ...); one that violates the
//     warn level gets a warning.
//   - Pod controllers (Deployments, Jobs, ...) whose template violates the warn level only get a
//     warning, as upstream: their pods are refused when the controller creates them.
//   - Namespace labels are validated, and raising a namespace's enforce level warns about the
//     existing pods that violate the new level.
//
// A namespace that does not label its enforce or warn level gets the site default
// (Config.PodSecurityDefault), version latest. The namespaces of PodSecurityExemptNamespaces are exempt.
// There is no audit log, so audit levels have no effect.
type podSecurityPlugin struct {
	*admission.Handler
	delegate *psadmission.Admission
}

var _ admission.ValidationInterface = (*podSecurityPlugin)(nil)

// newPodSecurityPlugin reads namespaces from the API server's informers (falling back to the
// client for one created a moment ago). The existing pods a namespace's new enforce level is
// checked against are listed through the client, and only then: a pod informer would hold every
// pod of the site in the API server.
func newPodSecurityPlugin(f informers.SharedInformerFactory, client kubernetes.Interface, level string) (*podSecurityPlugin, error) {
	ns := f.Core().V1().Namespaces()
	p, err := newPodSecurity(level, psadmission.NamespaceGetterFromListerAndClient(ns.Lister(), client), psadmission.PodListerFromClient(client))
	if err != nil {
		return nil, err
	}
	p.SetReadyFunc(ns.Informer().HasSynced)
	return p, nil
}

// newPodSecurity builds the plugin on the given namespace and pod sources; level is the site
// default ("" for DefaultPodSecurityLevel).
func newPodSecurity(level string, namespaces psadmission.NamespaceGetter, pods psadmission.PodLister) (*podSecurityPlugin, error) {
	cfg, err := podSecurityConfiguration(level)
	if err != nil {
		return nil, err
	}
	evaluator, err := pspolicy.NewEvaluator(pspolicy.DefaultChecks(), nil)
	if err != nil {
		return nil, fmt.Errorf("pod security checks: %w", err)
	}
	delegate := &psadmission.Admission{
		Configuration:    cfg,
		Evaluator:        evaluator,
		Metrics:          noPodSecurityMetrics{},
		PodSpecExtractor: psadmission.DefaultPodSpecExtractor{},
		NamespaceGetter:  namespaces,
		PodLister:        pods,
	}
	if err := delegate.CompleteConfiguration(); err != nil {
		return nil, fmt.Errorf("pod security admission: %w", err)
	}
	if err := delegate.ValidateConfiguration(); err != nil {
		return nil, fmt.Errorf("pod security admission: %w", err)
	}
	return &podSecurityPlugin{Handler: admission.NewHandler(admission.Create, admission.Update), delegate: delegate}, nil
}

// podSecurityConfiguration is the library's default configuration with the site default as the
// enforce and warn levels and flotilla's namespaces exempt.
func podSecurityConfiguration(level string) (*psconfig.PodSecurityConfiguration, error) {
	if level == "" {
		level = DefaultPodSecurityLevel
	}
	if err := validatePodSecurityLevel(level); err != nil {
		return nil, err
	}
	cfg, err := psload.LoadFromData(nil)
	if err != nil {
		return nil, fmt.Errorf("pod security defaults: %w", err)
	}
	cfg.Defaults.Enforce, cfg.Defaults.EnforceVersion = level, string(psapi.VersionLatest)
	cfg.Defaults.Warn, cfg.Defaults.WarnVersion = level, string(psapi.VersionLatest)
	cfg.Exemptions.Namespaces = append([]string(nil), PodSecurityExemptNamespaces...)
	return cfg, nil
}

// Validate implements admission.ValidationInterface: the library's decision, its warnings added
// to the response, its status returned when it refuses.
func (p *podSecurityPlugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	gr := a.GetResource().GroupResource()
	if gr != corev1.Resource("namespaces") && gr != corev1.Resource("pods") && !p.delegate.PodSpecExtractor.HasPodSpec(gr) {
		return nil
	}
	result := p.delegate.Validate(ctx, podSecurityAttributes{a})
	for _, w := range result.Warnings {
		warning.AddWarning(ctx, "", w)
	}
	if !result.Allowed {
		if result.Result != nil {
			return &apierrors.StatusError{ErrStatus: *result.Result}
		}
		return admission.NewForbidden(a, errors.New("Not allowed by PodSecurity"))
	}
	return nil
}

// podSecurityAttributes adapts admission.Attributes to the library's: flotilla's admission
// objects are already the v1 types the library expects.
type podSecurityAttributes struct {
	admission.Attributes
}

var _ psapi.Attributes = podSecurityAttributes{}

func (a podSecurityAttributes) GetOperation() admissionv1.Operation {
	return admissionv1.Operation(a.Attributes.GetOperation())
}

func (a podSecurityAttributes) GetObject() (runtime.Object, error) {
	return a.Attributes.GetObject(), nil
}

func (a podSecurityAttributes) GetOldObject() (runtime.Object, error) {
	return a.Attributes.GetOldObject(), nil
}

func (a podSecurityAttributes) GetUserName() string {
	if u := a.GetUserInfo(); u != nil {
		return u.GetName()
	}
	return ""
}

// noPodSecurityMetrics drops the library's evaluation metrics.
type noPodSecurityMetrics struct{}

func (noPodSecurityMetrics) RecordEvaluation(psmetrics.Decision, psapi.LevelVersion, psmetrics.Mode, psapi.Attributes) {
}
func (noPodSecurityMetrics) RecordExemption(psapi.Attributes)   {}
func (noPodSecurityMetrics) RecordError(bool, psapi.Attributes) {}
