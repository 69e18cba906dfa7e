package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/test/framework"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Outcome of `kubectl apply -f` of a spec fixture.
const (
	wantApply   = "apply"   // must be accepted, and `kubectl get -f` must then find every object
	wantInvalid = "invalid" // must be rejected, with errContains in kubectl's error output
	wantSkip    = "skip"    // not applied: not a whole object of a served kind (reason in why)
)

// specManifest is one manifest from the spec appendices (/work/shared/spec/*.md). Files live in
// testdata/spec/<name>.yaml, copied verbatim with a first comment line citing the source.
type specManifest struct {
	name        string // file name without .yaml (for skips: a stable id, no file)
	want        string
	errContains string // wantInvalid: substring kubectl's error output must contain
	why         string // the spec items that decide the expectation (or the reason to skip)
	// ns is the namespace the manifest itself pins (created first when missing). When empty,
	// the manifest is applied with -n into a fresh namespace of its own, so that the many
	// fixtures that reuse a name (my-service, web, hello, ...) do not update one another.
	ns   string
	note string // what the manifest needs first, or how to make an invalid one valid
}

var specManifests = []specManifest{
	// --- concepts.md Appendix A ---
	{name: "concepts-A.01-simple-pod", want: wantApply, why: "concepts.md POD-07"},
	{name: "concepts-A.02-job-hello", want: wantApply, why: "concepts.md POD-31"},
	{name: "concepts-A.03-frontend", want: wantApply, why: "concepts.md RS-01..RS-06"},
	{name: "concepts-A.04-pod-rs", want: wantApply, why: "concepts.md RS-05, RS-06 (two Pods)"},
	{name: "concepts-A.05-pod-frontend-b2zdv", want: wantSkip, why: "expected-shape excerpt of `kubectl get pod -o yaml` output (ends with `...`, no spec), not an input manifest"},
	{name: "concepts-A.06-delete-propagation", want: wantSkip, why: "REST/curl transcript, not a manifest"},
	{name: "concepts-A.07-hpa-rs", want: wantSkip, why: "autoscaling/v1 HorizontalPodAutoscaler is not served (RS-24 is P2)"},
	{name: "concepts-A.08-cronjob", want: wantApply, why: "concepts.md CJ-05"},
	{name: "concepts-A.09-cron-syntax", want: wantSkip, why: "cron syntax text, not a manifest"},
	{name: "concepts-A.10-deployment", want: wantApply, why: "concepts.md OBJ-05, B.7"},
	{name: "concepts-A.11-nginx-demo", want: wantApply, why: "concepts.md NAME-10"},
	{name: "concepts-A.12-node", want: wantApply, why: "concepts.md NODE-03 (a manually created Node is accepted and validated); JSON after the comment line"},
	{name: "concepts-A.13-node-ready-condition", want: wantSkip, why: "JSON fragment (`\"conditions\": [...]`), not a whole object"},
	{name: "concepts-A.14-kubelet-shutdown-grace", want: wantSkip, why: "KubeletConfiguration fragment: not an API object, not served"},
	{name: "concepts-A.15-kubelet-memory-swap", want: wantSkip, why: "KubeletConfiguration fragment: not an API object, not served"},
	{name: "concepts-A.16-clusterrole-ccm", want: wantSkip, why: "rbac.authorization.k8s.io/v1 ClusterRole is not served"},
	{name: "concepts-A.17-registry-config-glob", want: wantSkip, why: "registry config.json, not a Kubernetes object"},
	{name: "concepts-A.18-registry-config-prefix", want: wantSkip, why: "registry config.json, not a Kubernetes object"},
	{name: "concepts-A.19-pod-awesomeapps", want: wantApply, ns: "awesomeapps", why: "concepts.md IMG-24, IMG-28 (the pod.yaml of the heredoc; the kustomization.yaml part is not an object)",
		note: "needs namespace awesomeapps; the Secret myregistrykey need not exist for admission"},
	{name: "concepts-A.20-runtimeclass", want: wantSkip, why: "node.k8s.io/v1 RuntimeClass is not served"},
	{name: "concepts-A.21-pod-mypod-runtimeclass", want: wantSkip, why: "defective fragment: truncated with `# ...` in the source (no containers), and needs RuntimeClass myclass (not served)"},
	{name: "concepts-A.22-containerd-handler", want: wantSkip, why: "containerd TOML, not a manifest"},
	{name: "concepts-A.23-crio-handler", want: wantSkip, why: "CRI-O TOML, not a manifest (N/A)"},
	{name: "concepts-A.24-simple-service", want: wantApply, why: "concepts.md SVC-02, AC-SVC-1"},
	{name: "concepts-A.25-pod-and-service-named-port", want: wantApply, why: "concepts.md SVC-04"},
	{name: "concepts-A.26-service-no-selector", want: wantApply, why: "concepts.md SVC-07"},
	{name: "concepts-A.27-endpointslice", want: wantApply, why: "concepts.md SVC-07, SVC-08"},
	{name: "concepts-A.28-multi-port-service", want: wantApply, why: "concepts.md SVC-06"},
	{name: "concepts-A.29-nodeport-30007", want: wantApply, why: "concepts.md SVC-19, AC-SVC-2 (30007 is in 30000-32767 and used by no other fixture)"},
	{name: "concepts-A.30-loadbalancer-with-status", want: wantInvalid, errContains: "not in the valid range",
		why:  "concepts.md SVC-16, AC-SVC-2: clusterIP 10.0.171.239 is outside the default service CIDR 10.96.0.0/12 -> 422",
		note: "valid on an agent started with a --service-cidr that contains 10.0.171.239 (e.g. 10.0.0.0/16)"},
	{name: "concepts-A.31-internal-lb-annotations", want: wantSkip, why: "9 metadata fragments, not a valid single YAML document (the spec says so)"},
	{name: "concepts-A.32-externalname-prod", want: wantApply, ns: "prod", why: "concepts.md SVC-30", note: "needs namespace prod"},
	{name: "concepts-A.33-externalips", want: wantApply, why: "concepts.md SVC-44 (externalIPs allowed on any Service type)"},
	{name: "concepts-A.34-minimal-ingress", want: wantApply, why: "concepts.md ING-06..ING-08 (the IngressClass nginx-example need not exist)"},
	{name: "concepts-A.35-ingress-resource-backend", want: wantApply, why: "concepts.md ING-09"},
	{name: "concepts-A.36-ingress-wildcard-host", want: wantApply, why: "concepts.md ING-17, ING-18"},
	{name: "concepts-A.37-external-lb", want: wantApply, why: "concepts.md ING-19"},
	{name: "concepts-A.38-ingressclass-scopes", want: wantApply, why: "concepts.md ING-20 (two cluster-scoped IngressClasses)"},
	{name: "concepts-A.39-default-ingressclass", want: wantApply, why: "concepts.md ING-22"},
	{name: "concepts-A.40-test-ingress", want: wantApply, why: "concepts.md ING-23"},
	{name: "concepts-A.41-simple-fanout-example", want: wantApply, why: "concepts.md ING-24"},
	{name: "concepts-A.42-name-virtual-host-ingress", want: wantApply, why: "concepts.md ING-26"},

	// --- services-networking.md Appendix B ---
	{name: "svcnet-B.01-service-my-service-selector", want: wantApply, why: "services-networking.md SVC-01/02/09"},
	{name: "svcnet-B.02-service-my-service-no-selector", want: wantApply, why: "services-networking.md SVC-11"},
	{name: "svcnet-B.03-endpoints-my-service", want: wantApply, why: "services-networking.md SVC-12, EPS-19"},
	{name: "svcnet-B.04-service-multi-port", want: wantApply, why: "services-networking.md SVC-08/10"},
	{name: "svcnet-B.05-service-loadbalancer-with-status", want: wantInvalid, errContains: "not in the valid range",
		why:  "services-networking.md SVC-30: clusterIP 10.0.171.239 is outside the default service CIDR 10.96.0.0/12 -> 422",
		note: "valid on an agent started with a --service-cidr that contains 10.0.171.239 (e.g. 10.0.0.0/16)"},
	{name: "svcnet-B.06-lb-internal-gcp.fragment", want: wantSkip, why: "fragment ([...] markers), P2 SVC-61"},
	{name: "svcnet-B.07-lb-internal-aws.fragment", want: wantSkip, why: "fragment ([...] markers), P2 SVC-61"},
	{name: "svcnet-B.08-lb-internal-azure.fragment", want: wantSkip, why: "fragment ([...] markers), P2 SVC-61"},
	{name: "svcnet-B.09-lb-internal-openstack.fragment", want: wantSkip, why: "fragment ([...] markers), P2 SVC-61"},
	{name: "svcnet-B.10-lb-internal-baidu.fragment", want: wantSkip, why: "fragment ([...] markers), P2 SVC-61"},
	{name: "svcnet-B.11-lb-internal-tencent.fragment", want: wantSkip, why: "fragment ([...] markers), P2 SVC-61"},
	{name: "svcnet-B.12-aws-ssl-cert.fragment", want: wantSkip, why: "metadata fragment, P2 SVC-62"},
	{name: "svcnet-B.13-aws-backend-protocol.fragment", want: wantSkip, why: "metadata fragment with a placeholder value, P2 SVC-62"},
	{name: "svcnet-B.14-aws-ssl-ports.fragment", want: wantSkip, why: "metadata fragment, P2 SVC-62"},
	{name: "svcnet-B.15-aws-ssl-negotiation-policy.fragment", want: wantSkip, why: "metadata fragment, P2 SVC-62"},
	{name: "svcnet-B.16-aws-proxy-protocol.fragment", want: wantSkip, why: "metadata fragment, P2 SVC-63"},
	{name: "svcnet-B.17-aws-access-logs.fragment", want: wantSkip, why: "metadata fragment, P2 SVC-64"},
	{name: "svcnet-B.18-aws-connection-draining.fragment", want: wantSkip, why: "metadata fragment, P2 SVC-65"},
	{name: "svcnet-B.19-aws-elb-misc.fragment", want: wantSkip, why: "metadata fragment, P2 SVC-66"},
	{name: "svcnet-B.20-aws-nlb.fragment", want: wantSkip, why: "metadata fragment, P2 SVC-67"},
	{name: "svcnet-B.21-loadbalancer-source-ranges.fragment", want: wantSkip, why: "spec fragment, SVC-69"},
	{name: "svcnet-B.22-tke-annotations.fragment", want: wantSkip, why: "metadata fragment that is not even a valid mapping (D.7, D.8); no apiVersion/kind to apply"},
	{name: "svcnet-B.23-service-externalname-prod", want: wantApply, ns: "prod", why: "services-networking.md SVC-71", note: "needs namespace prod"},
	{name: "svcnet-B.24-service-externalips", want: wantApply, why: "services-networking.md SVC-73, D.1 (80.11.12.10)"},
	{name: "svcnet-B.25-minimal-ingress", want: wantApply, why: "services-networking.md B.25"},
	{name: "svcnet-B.26-ingress-resource-backend", want: wantApply, why: "services-networking.md B.26"},
	{name: "svcnet-B.27-ingress-wildcard-host", want: wantApply, why: "services-networking.md B.27"},
	{name: "svcnet-B.28-external-lb", want: wantApply, why: "services-networking.md ING-24/25"},
	{name: "svcnet-B.29-ingressclass-parameters-scope", want: wantApply, why: "services-networking.md ING-28"},
	{name: "svcnet-B.30-default-ingressclass", want: wantApply, why: "services-networking.md ING-26, IC-03"},
	{name: "svcnet-B.31-test-ingress", want: wantApply, why: "services-networking.md ING-30"},
	{name: "svcnet-B.32-simple-fanout-example", want: wantApply, why: "services-networking.md ING-32"},
	{name: "svcnet-B.33-name-virtual-host-ingress", want: wantApply, why: "services-networking.md ING-34"},
	{name: "svcnet-B.34-name-virtual-host-ingress-no-third-host", want: wantApply, why: "services-networking.md ING-35"},
	{name: "svcnet-B.35-secret-testsecret-tls", want: wantInvalid, errContains: "illegal base64 data", ns: "default",
		why:  "services-networking.md B.35 / D.17: the data values are placeholders, not base64, so the Secret cannot be decoded",
		note: "a usable fixture needs a generated certificate for https-example.foo.com"},
	{name: "svcnet-B.36-tls-example-ingress", want: wantApply, why: "services-networking.md ING-37/38/39 (the Secret need not exist for admission)"},
	{name: "svcnet-B.37-ingress-test-edited-spec.fragment", want: wantSkip, why: "fragment (spec only, ends with `..`), ING-43"},
	{name: "svcnet-B.38-gatewayclass-example-class", want: wantSkip, why: "Gateway API (gateway.networking.k8s.io) is not served"},
	{name: "svcnet-B.39-gateway-example-gateway", want: wantSkip, why: "Gateway API (gateway.networking.k8s.io) is not served"},
	{name: "svcnet-B.40-httproute-example-httproute", want: wantSkip, why: "Gateway API (gateway.networking.k8s.io) is not served"},
	{name: "svcnet-B.41-grpcroute-example-grpcroute", want: wantSkip, why: "Gateway API (gateway.networking.k8s.io) is not served"},
	{name: "svcnet-B.42-grpcroute-example-grpcroute-method-match", want: wantSkip, why: "Gateway API (gateway.networking.k8s.io) is not served"},
	{name: "svcnet-B.43-endpointslice-example-abc", want: wantApply, why: "services-networking.md EPS-04/14"},
	{name: "svcnet-B.44-networkpolicy", want: wantApply, ns: "default", why: "services-networking.md NP-11"},
	{name: "svcnet-B.45-netpol-from-ns-AND-pod.fragment", want: wantSkip, why: "fragment (`...` markers), NP-17"},
	{name: "svcnet-B.46-netpol-from-ns-OR-pod.fragment", want: wantSkip, why: "fragment (`...` markers), NP-18"},
	{name: "svcnet-B.47-network-policy-default-deny-ingress", want: wantApply, why: "services-networking.md NP-22"},
	{name: "svcnet-B.48-network-policy-allow-all-ingress", want: wantApply, why: "services-networking.md NP-23"},
	{name: "svcnet-B.49-network-policy-default-deny-egress", want: wantApply, why: "services-networking.md NP-24"},
	{name: "svcnet-B.50-network-policy-allow-all-egress", want: wantApply, why: "services-networking.md NP-25"},
	{name: "svcnet-B.51-network-policy-default-deny-all", want: wantApply, why: "services-networking.md NP-26"},
	{name: "svcnet-B.52-networkpolicy-multiport-egress", want: wantApply, ns: "default", why: "services-networking.md NP-28/29 (endPort 32768 >= port 32000)"},
	{name: "svcnet-B.53-netpol-egress-namespaces", want: wantApply, why: "services-networking.md NP-30 (the C.8 namespace labels matter for traffic, not admission)"},
	{name: "svcnet-B.54-netpol-hostnetwork-spec-podselector.fragment", want: wantSkip, why: "fragment (`...` markers), NP-34"},
	{name: "svcnet-B.55-netpol-hostnetwork-ingress-from.fragment", want: wantSkip, why: "fragment (`...` markers), NP-34"},
	{name: "svcnet-B.56-dns-busybox-subdomain", want: wantApply, why: "services-networking.md DNS-15/16/17 (headless Service + 2 Pods)"},
	{name: "svcnet-B.57-pod-busybox-hostnetwork-clusterfirstwithhostnet", want: wantApply, ns: "default", why: "services-networking.md DNS-24"},
	{name: "svcnet-B.58-custom-dns", want: wantApply, ns: "default", why: "services-networking.md DNS-25..30"},
	{name: "svcnet-B.59-ndf-node-example-node", want: wantApply, why: "services-networking.md NDF-03 (status is ignored on create)"},
	{name: "svcnet-B.60-ndf-pod-example-pod", want: wantApply, why: "services-networking.md NDF-07/08 (restartPolicyRules with a container restartPolicy is valid)"},
	{name: "svcnet-E.1-kube-dns-static-clusterip", want: wantApply, ns: "kube-system", why: "services-networking.md CIP-06 (10.96.0.10 is in the static band of 10.96.0.0/12)"},
	{name: "svcnet-E.2-service-internal-traffic-policy-local", want: wantApply, why: "services-networking.md ITP-05"},
	{name: "svcnet-E.3-endpointslice-topology-hints", want: wantApply, why: "services-networking.md TOP-U3"},

	// --- statefulset-daemonset.md §2 (the verbatim blocks lost all indentation, §0; the
	// spec's token-identical reconstructions are used) ---
	{name: "sts-M1", want: wantApply, why: "statefulset-daemonset.md M1 (headless Service web + StatefulSet web)"},
	{name: "sts-M2", want: wantApply, why: "statefulset-daemonset.md M2-full (SS-PVC-03..07; no StorageClass needed for admission)"},
	{name: "sts-M3", want: wantApply, why: "statefulset-daemonset.md M3 (local PV pinned to k8s-node-1; the node need not exist)"},
	{name: "sts-M4-retention-policy.fragment", want: wantSkip, why: "spec fragment; M4-dd is described, not written out"},
	{name: "sts-M5-partition.fragment", want: wantSkip, why: "spec fragment"},
	{name: "sts-M6", want: wantApply, why: "statefulset-daemonset.md M6 (node-exporter DaemonSet)"},
	{name: "sts-M7-daemonset-pod-affinity.fragment", want: wantSkip, why: "fragment generated by the controller, not a manifest"},
	{name: "sts-M8-daemonset-pod-tolerations.output", want: wantSkip, why: "kubectl output fragment, not a manifest"},
	{name: "sts-derived-M6-notol-M6-gpu-M8-surge-M9-M12", want: wantSkip, why: "derived variants described in prose, not written out in the spec"},

	// --- api-reference.md Appendix A: no whole object of a served kind ---
	{name: "apiref-FX-MT-FX-W-FX-PG-FX-TBL-FX-PM", want: wantSkip, why: "HTTP exchanges with `…` placeholders, not manifests"},
	{name: "apiref-FX-COL-02-kind-List", want: wantSkip, why: "kubectl output (command line, `...` truncation), client-side kind List"},
	{name: "apiref-FX-DEL-01-configmap-finalizers", want: wantSkip, why: "defective fragment: no name, `nil` and a trailing comma are not JSON (the spec says so)"},
	{name: "apiref-FX-DR-02-rbac-rule", want: wantSkip, why: "RBAC rules fragment; RBAC is not served"},
	{name: "apiref-FX-AUTHZ-01-authorization-configuration", want: wantSkip, why: "AuthorizationConfiguration file, not an API object (marked DO NOT USE AS IS)"},
	{name: "apiref-FX-AUTHZ-04-selfsubjectaccessreview", want: wantSkip, why: "authorization.k8s.io SelfSubjectAccessReview is not in the served kinds; heredoc transcript"},
	{name: "apiref-FX-ABAC-policy-lines", want: wantSkip, why: "ABAC policy file lines, not API objects"},
	{name: "apiref-FX-WK-07-last-applied", want: wantSkip, why: "annotation value with invalid JSON, not a manifest"},
}

var nonDNSLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// specNamespace is the namespace a fixture without its own namespace is applied into.
func specNamespace(name string) string {
	ns := "spec-" + strings.Trim(nonDNSLabel.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(ns) > 63 {
		ns = strings.TrimRight(ns[:63], "-")
	}
	return ns
}

// TestSpecManifests applies every whole-object manifest of a served kind from the spec
// appendices with the real kubectl (server-side field validation) and checks the outcome the
// spec prescribes.
func TestSpecManifests(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{})
	dir := filepath.Join(framework.RepoRoot(), "test", "api", "testdata", "spec")

	ensureNS := func(t *testing.T, ns string) {
		t.Helper()
		if _, _, err := a.Kubectl("", "get", "namespace", ns); err == nil {
			return
		}
		a.MustKubectl("", "create", "namespace", ns)
	}

	seen := map[string]bool{}
	for _, m := range specManifests {
		if seen[m.name] {
			t.Fatalf("duplicate table entry %s", m.name)
		}
		seen[m.name] = true
		t.Run(m.name, func(t *testing.T) {
			if m.want == wantSkip {
				t.Skipf("not applied: %s", m.why)
			}
			if m.note != "" {
				t.Logf("note: %s", m.note)
			}
			file := filepath.Join(dir, m.name+".yaml")
			args := []string{"-f", file}
			if m.ns != "" {
				ensureNS(t, m.ns)
			} else {
				ns := specNamespace(m.name)
				ensureNS(t, ns)
				args = append(args, "-n", ns)
			}
			out, errOut, err := a.Kubectl("", append([]string{"apply", "--validate=strict"}, args...)...)
			switch m.want {
			case wantApply:
				if err != nil {
					t.Fatalf("kubectl apply -f %s.yaml was rejected, but the spec (%s) says it is valid: %v\nstdout: %s\nstderr: %s",
						m.name, m.why, err, out, errOut)
				}
				if strings.Contains(errOut, "Warning") {
					t.Logf("apply warnings: %s", errOut)
				}
				gout, gerr, err := a.Kubectl("", append([]string{"get", "-o", "json"}, args...)...)
				if err != nil {
					t.Fatalf("kubectl get -f %s.yaml after apply: %v\nstdout: %s\nstderr: %s", m.name, err, gout, gerr)
				}
				// Every field the manifest sets (except status) must be stored as written: a
				// field dropped or rewritten silently is a wrong acceptance.
				want := manifestDocs(t, file)
				got := storedObjects(t, gout)
				if len(got) != len(want) {
					t.Fatalf("kubectl get -f %s.yaml returned %d objects, the file has %d", m.name, len(got), len(want))
				}
				for i := range want {
					delete(want[i], "status")
					for _, d := range subsetDiff(fmt.Sprintf("%v/%v", want[i]["kind"], nameOf(want[i])), want[i], got[i]) {
						t.Errorf("%s.yaml: stored object differs from the manifest: %s", m.name, d)
					}
				}
			case wantInvalid:
				if err == nil {
					t.Fatalf("kubectl apply -f %s.yaml was accepted, but the spec (%s) says it is invalid\nstdout: %s\nstderr: %s",
						m.name, m.why, out, errOut)
				}
				t.Logf("rejected as expected: %s", strings.TrimSpace(errOut))
				if !strings.Contains(out+errOut, m.errContains) {
					t.Errorf("kubectl apply -f %s.yaml failed without %q (%s):\nstdout: %s\nstderr: %s", m.name, m.errContains, m.why, out, errOut)
				}
				if gout, _, err := a.Kubectl("", append([]string{"get"}, args...)...); err == nil {
					t.Errorf("the rejected %s.yaml left objects behind:\n%s", m.name, gout)
				}
			default:
				t.Fatalf("bad expectation %q", m.want)
			}
		})
	}

	t.Run("every-testdata-file-is-in-the-table", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			name := strings.TrimSuffix(filepath.Base(f), ".yaml")
			if !seen[name] {
				t.Errorf("testdata/spec/%s.yaml has no table entry", name)
			}
		}
		for _, m := range specManifests {
			if m.want == wantSkip {
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, m.name+".yaml")); err != nil {
				t.Errorf("%s: %v", m.name, err)
			}
		}
	})
}

// manifestDocs decodes the non-empty documents of a YAML (or JSON) file.
func manifestDocs(t *testing.T, file string) []map[string]interface{} {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var docs []map[string]interface{}
	for {
		var doc map[string]interface{}
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return docs
			}
			t.Fatalf("decode %s: %v", file, err)
		}
		if len(doc) > 0 {
			docs = append(docs, doc)
		}
	}
}

// storedObjects decodes `kubectl get -o json` output: one object, or a List of them.
func storedObjects(t *testing.T, out string) []map[string]interface{} {
	t.Helper()
	var obj map[string]interface{}
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatalf("decode kubectl get output: %v\n%s", err, out)
	}
	if obj["kind"] != "List" {
		return []map[string]interface{}{obj}
	}
	var objs []map[string]interface{}
	items, _ := obj["items"].([]interface{})
	for _, it := range items {
		m, _ := it.(map[string]interface{})
		objs = append(objs, m)
	}
	return objs
}

func nameOf(obj map[string]interface{}) interface{} {
	md, _ := obj["metadata"].(map[string]interface{})
	return md["name"]
}

// subsetDiff lists where got does not contain want: maps must hold every key of want (a zero
// value in want may be absent), lists must have want's length, scalars must be equal.
func subsetDiff(path string, want, got interface{}) []string {
	switch w := want.(type) {
	case map[string]interface{}:
		g, ok := got.(map[string]interface{})
		if !ok {
			if len(w) == 0 && got == nil {
				return nil
			}
			return []string{fmt.Sprintf("%s: want %v, got %v", path, jsonString(want), jsonString(got))}
		}
		var diffs []string
		for k, wv := range w {
			gv, present := g[k]
			if !present {
				if isZero(wv) { // omitempty: "", 0, false, {} and [] are not serialized
					continue
				}
				diffs = append(diffs, fmt.Sprintf("%s.%s: want %v, missing", path, k, jsonString(wv)))
				continue
			}
			diffs = append(diffs, subsetDiff(path+"."+k, wv, gv)...)
		}
		return diffs
	case []interface{}:
		g, ok := got.([]interface{})
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %v, got %v", path, jsonString(want), jsonString(got))}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, subsetDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	case nil:
		return nil
	default:
		if jsonString(want) != jsonString(got) {
			return []string{fmt.Sprintf("%s: want %v, got %v", path, jsonString(want), jsonString(got))}
		}
		return nil
	}
}

func jsonString(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func isZero(v interface{}) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case float64:
		return x == 0
	case int64:
		return x == 0
	case map[string]interface{}:
		return len(x) == 0
	case []interface{}:
		return len(x) == 0
	}
	return false
}
