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

// Outcome of `kubectl apply -f` of an example manifest.
const (
	wantApply   = "apply"   // must be accepted, and `kubectl get -f` must then find every object
	wantInvalid = "invalid" // must be rejected, with errContains in kubectl's error output
	wantSkip    = "skip"    // not applied: not a whole object of a served kind (reason in why)
)

// specManifest is one example manifest: most are copied verbatim from the Kubernetes
// documentation (its translated editions keep the comments in their language), a few from a
// StatefulSet/DaemonSet tutorial. Files live in testdata/spec/<name>.yaml with a first comment
// line saying where the example comes from. Examples that are not whole objects of a served kind
// (fragments, kubectl output, HorizontalPodAutoscaler, RBAC, RuntimeClass, Gateway API) have no
// file.
type specManifest struct {
	name        string // file name without .yaml (for skips: a stable id, no file)
	want        string
	errContains string // wantInvalid: substring kubectl's error output must contain
	why         string // what the manifest exercises and why it is valid or invalid (or the reason to skip)
	// ns is the namespace the manifest itself pins (created first when missing). When empty,
	// the manifest is applied with -n into a fresh namespace of its own, so that the many
	// fixtures that reuse a name (my-service, web, hello, ...) do not update one another.
	ns   string
	note string // what the manifest needs first, or how to make an invalid one valid
}

var specManifests = []specManifest{
	// --- Kubernetes documentation, Concepts: workloads, objects, Nodes, Services, Ingress ---
	{name: "concepts-A.01-simple-pod", want: wantApply, why: "a single-container Pod"},
	{name: "concepts-A.02-job-hello", want: wantApply, why: "a Job whose pod template has restartPolicy OnFailure"},
	{name: "concepts-A.03-frontend", want: wantApply, why: "a ReplicaSet whose template labels match its selector"},
	{name: "concepts-A.04-pod-rs", want: wantApply, why: "two bare Pods with the labels of the frontend ReplicaSet"},
	{name: "concepts-A.08-cronjob", want: wantApply, why: "a CronJob with a five-field schedule"},
	{name: "concepts-A.10-deployment", want: wantApply, why: "a Deployment with selector and matching template labels"},
	{name: "concepts-A.11-nginx-demo", want: wantApply, why: "a Pod whose name is a DNS subdomain"},
	{name: "concepts-A.12-node", want: wantApply, why: "a manually created Node is accepted and validated; JSON after the comment line"},
	{name: "concepts-A.19-pod-awesomeapps", want: wantApply, ns: "awesomeapps", why: "a Pod with imagePullSecrets in its own namespace (the kustomization.yaml part of the example is not an object)",
		note: "needs namespace awesomeapps; the Secret myregistrykey need not exist for admission"},
	{name: "concepts-A.24-simple-service", want: wantApply, why: "a ClusterIP Service with a selector and a numeric targetPort"},
	{name: "concepts-A.25-pod-and-service-named-port", want: wantApply, why: "a Pod with a named container port and a Service whose targetPort names it"},
	{name: "concepts-A.26-service-no-selector", want: wantApply, why: "a Service without selector (endpoints managed by the user)"},
	{name: "concepts-A.27-endpointslice", want: wantApply, why: "a user-managed EndpointSlice for a Service without selector"},
	{name: "concepts-A.28-multi-port-service", want: wantApply, why: "a Service with several named ports"},
	{name: "concepts-A.29-nodeport-30007", want: wantApply, why: "a NodePort Service with an explicit nodePort (30007 is in 30000-32767 and used by no other fixture)"},
	{name: "concepts-A.30-loadbalancer-with-status", want: wantInvalid, errContains: "not in the valid range",
		why:  "clusterIP 10.0.171.239 is outside the default service CIDR 10.96.0.0/12 -> 422",
		note: "valid on an agent started with a --service-cidr that contains 10.0.171.239 (e.g. 10.0.0.0/16)"},
	{name: "concepts-A.32-externalname-prod", want: wantApply, ns: "prod", why: "an ExternalName Service", note: "needs namespace prod"},
	{name: "concepts-A.33-externalips", want: wantApply, why: "externalIPs are allowed on any Service type"},
	{name: "concepts-A.34-minimal-ingress", want: wantApply, why: "an Ingress with one Prefix path (the IngressClass nginx-example need not exist)"},
	{name: "concepts-A.35-ingress-resource-backend", want: wantApply, why: "an Ingress with resource backends (refused by the proxy, valid for the API)"},
	{name: "concepts-A.36-ingress-wildcard-host", want: wantApply, why: "an Ingress with an exact and a wildcard host"},
	{name: "concepts-A.37-external-lb", want: wantApply, why: "an IngressClass with cluster-scoped parameters"},
	{name: "concepts-A.38-ingressclass-scopes", want: wantApply, why: "two IngressClasses, parameters of Cluster and Namespace scope"},
	{name: "concepts-A.39-default-ingressclass", want: wantApply, why: "an IngressClass marked default"},
	{name: "concepts-A.40-test-ingress", want: wantApply, why: "an Ingress with only a defaultBackend"},
	{name: "concepts-A.41-simple-fanout-example", want: wantApply, why: "an Ingress fanning one host out to two Services by path"},
	{name: "concepts-A.42-name-virtual-host-ingress", want: wantApply, why: "an Ingress with name-based virtual hosts"},

	// --- Kubernetes documentation, Services, Load Balancing and Networking ---
	{name: "svcnet-B.01-service-my-service-selector", want: wantApply, why: "a Service with a selector"},
	{name: "svcnet-B.02-service-my-service-no-selector", want: wantApply, why: "a Service without selector"},
	{name: "svcnet-B.03-endpoints-my-service", want: wantApply, why: "legacy Endpoints written by the user for a Service without selector"},
	{name: "svcnet-B.04-service-multi-port", want: wantApply, why: "a Service with several named ports"},
	{name: "svcnet-B.05-service-loadbalancer-with-status", want: wantInvalid, errContains: "not in the valid range",
		why:  "clusterIP 10.0.171.239 is outside the default service CIDR 10.96.0.0/12 -> 422",
		note: "valid on an agent started with a --service-cidr that contains 10.0.171.239 (e.g. 10.0.0.0/16)"},
	{name: "svcnet-B.23-service-externalname-prod", want: wantApply, ns: "prod", why: "an ExternalName Service", note: "needs namespace prod"},
	{name: "svcnet-B.24-service-externalips", want: wantApply, why: "a Service with externalIPs (80.11.12.10)"},
	{name: "svcnet-B.25-minimal-ingress", want: wantApply, why: "an Ingress with one Prefix path"},
	{name: "svcnet-B.26-ingress-resource-backend", want: wantApply, why: "an Ingress with resource backends"},
	{name: "svcnet-B.27-ingress-wildcard-host", want: wantApply, why: "an Ingress with an exact and a wildcard host"},
	{name: "svcnet-B.28-external-lb", want: wantApply, why: "an IngressClass with parameters"},
	{name: "svcnet-B.29-ingressclass-parameters-scope", want: wantApply, why: "IngressClass parameters of Cluster and Namespace scope"},
	{name: "svcnet-B.30-default-ingressclass", want: wantApply, why: "an IngressClass marked default"},
	{name: "svcnet-B.31-test-ingress", want: wantApply, why: "an Ingress with only a defaultBackend"},
	{name: "svcnet-B.32-simple-fanout-example", want: wantApply, why: "an Ingress fanning one host out to two Services by path"},
	{name: "svcnet-B.33-name-virtual-host-ingress", want: wantApply, why: "an Ingress with name-based virtual hosts"},
	{name: "svcnet-B.34-name-virtual-host-ingress-no-third-host", want: wantApply, why: "name-based virtual hosts with a catch-all rule without host"},
	{name: "svcnet-B.35-secret-testsecret-tls", want: wantInvalid, errContains: "illegal base64 data", ns: "default",
		why:  "the data values are placeholders, not base64, so the Secret cannot be decoded",
		note: "a usable fixture needs a generated certificate for https-example.foo.com"},
	{name: "svcnet-B.36-tls-example-ingress", want: wantApply, why: "an Ingress with a tls section (the Secret need not exist for admission)"},
	{name: "svcnet-B.43-endpointslice-example-abc", want: wantApply, why: "an EndpointSlice with conditions, hostname, nodeName and zone"},
	{name: "svcnet-B.44-networkpolicy", want: wantApply, ns: "default", why: "a NetworkPolicy with ingress and egress rules, ipBlock with except"},
	{name: "svcnet-B.47-network-policy-default-deny-ingress", want: wantApply, why: "default deny ingress"},
	{name: "svcnet-B.48-network-policy-allow-all-ingress", want: wantApply, why: "allow all ingress"},
	{name: "svcnet-B.49-network-policy-default-deny-egress", want: wantApply, why: "default deny egress"},
	{name: "svcnet-B.50-network-policy-allow-all-egress", want: wantApply, why: "allow all egress"},
	{name: "svcnet-B.51-network-policy-default-deny-all", want: wantApply, why: "default deny ingress and egress"},
	{name: "svcnet-B.52-networkpolicy-multiport-egress", want: wantApply, ns: "default", why: "a port range with endPort (32768 >= port 32000)"},
	{name: "svcnet-B.53-netpol-egress-namespaces", want: wantApply, why: "egress to namespaces by label (the labels matter for traffic, not admission)"},
	{name: "svcnet-B.56-dns-busybox-subdomain", want: wantApply, why: "a headless Service and two Pods with hostname and subdomain"},
	{name: "svcnet-B.57-pod-busybox-hostnetwork-clusterfirstwithhostnet", want: wantInvalid, ns: "default",
		errContains: `violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`,
		why:         "a hostNetwork Pod (dnsPolicy ClusterFirstWithHostNet) in default: the site's default Pod Security level, baseline, refuses host namespaces outside a namespace labelled privileged"},
	{name: "svcnet-B.58-custom-dns", want: wantApply, ns: "default", why: "a Pod with dnsPolicy None and a dnsConfig"},
	{name: "svcnet-B.59-ndf-node-example-node", want: wantApply, why: "a Node with status.declaredFeatures (status is ignored on create)"},
	{name: "svcnet-B.60-ndf-pod-example-pod", want: wantApply, why: "restartPolicyRules with a container restartPolicy is valid"},
	{name: "svcnet-E.1-kube-dns-static-clusterip", want: wantApply, ns: "kube-system", why: "10.96.0.10 is in the static band of 10.96.0.0/12"},
	{name: "svcnet-E.2-service-internal-traffic-policy-local", want: wantApply, why: "internalTrafficPolicy Local"},
	{name: "svcnet-E.3-endpointslice-topology-hints", want: wantApply, why: "an EndpointSlice with zone hints"},

	// --- StatefulSet and DaemonSet examples of a Kubernetes tutorial (indentation restored) ---
	{name: "sts-M1", want: wantApply, why: "a headless Service web and a StatefulSet web"},
	{name: "sts-M2", want: wantApply, why: "a StatefulSet with volumeClaimTemplates (no StorageClass needed for admission)"},
	{name: "sts-M3", want: wantApply, why: "a local PersistentVolume pinned to k8s-node-1 (the node need not exist)"},
	{name: "sts-M6", want: wantApply, why: "a node-exporter DaemonSet"},
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

// TestSpecManifests applies every example manifest with the real kubectl (server-side field
// validation) and checks the expected outcome: accepted and stored as written, or rejected with
// the expected error.
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
					t.Fatalf("kubectl apply -f %s.yaml was rejected, but it is valid (%s): %v\nstdout: %s\nstderr: %s",
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
					t.Fatalf("kubectl apply -f %s.yaml was accepted, but it is invalid (%s)\nstdout: %s\nstderr: %s",
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
