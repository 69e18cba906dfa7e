package apiserver

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func offlineObj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	b, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	// Through JSON into unstructured, so numbers are int64 as a decoded request body has them.
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	return u
}

const offlineDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: demo}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports: [{containerPort: 80}]
status: {replicas: 7}
`

func TestValidateOffline(t *testing.T) {
	deployment := func(old, new string) string { return strings.Replace(offlineDeployment, old, new, 1) }
	tests := []struct {
		name string
		obj  string
		// want are the errors, each as field.Error.Error(); none: valid.
		want []string
	}{
		// Valid only once defaulted: imagePullPolicy, terminationMessagePolicy, the
		// strategy and the protocol are required by validation. status is ignored on create.
		{"valid Deployment", offlineDeployment, nil},
		{"Deployment without image", deployment("        image: nginx:1.27\n", ""),
			[]string{"spec.template.spec.containers[0].image: Required value: the container image, such as nginx:1.27"}},
		{"Deployment selecting other labels", deployment("{labels: {app: web}}", "{labels: {app: api}}"),
			[]string{`spec.template.metadata.labels: Invalid value: {"app":"api"}: ` + "`selector` does not match template `labels`"}},
		{"unknown fields", deployment("replicas: 2", "replica: 2\n  paused: false\n  strategy: {type: Recreate, surge: 1}"),
			[]string{"spec.replica: Forbidden: field not declared in schema", "spec.strategy.surge: Forbidden: field not declared in schema"}},
		{"unknown field in a list item", deployment("ports:", "imagePullPolcy: Always\n        ports:"),
			[]string{"spec.template.spec.containers[0].imagePullPolcy: Forbidden: field not declared in schema"}},
		{"value of the wrong type", deployment("replicas: 2", `replicas: "2"`),
			[]string{"spec.replicas: Invalid value: expected integer, got string"}},
		{"unknown kind", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
			[]string{`kind: Not found: no kind "Widget" in group "example.com" is served by flotilla`}},
		{"version not served", strings.Replace(offlineDeployment, "apps/v1", "apps/v1beta1", 1),
			[]string{`apiVersion: Unsupported value: "apps/v1beta1": supported values: "apps/v1"`}},

		{"valid Service", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: web}, ports: [{port: 80, targetPort: http}]}\n", nil},
		{"Service port out of range", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 99999, targetPort: 8080}]}\n",
			[]string{"spec.ports[0].port: Invalid value: 99999: must be between 1 and 65535, inclusive"}},
		// Allocation drops the node port of a ClusterIP Service before validation.
		{"ClusterIP Service with a nodePort", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80, nodePort: 5}]}\n", nil},
		// The site's service CIDR and node port range are not known offline.
		{"clusterIP and nodePort of any range", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {type: NodePort, clusterIP: 10.0.171.239, ports: [{port: 80, nodePort: 8080}]}\n", nil},
		{"Service name that is not a DNS label", "apiVersion: v1\nkind: Service\nmetadata: {name: web.app}\nspec: {ports: [{port: 80}]}\n",
			[]string{`metadata.name: Invalid value: "web.app": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`}},

		{"valid ConfigMap", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {KEY: v, file.txt: x}\nbinaryData: {b: aGk=}\n", nil},
		{"ConfigMap key with a space", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {'a b': x}\n",
			[]string{`data[a b]: Invalid value: "a b": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')`}},
		{"ConfigMap key in data and binaryData", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {k: x}\nbinaryData: {k: aGk=}\n",
			[]string{`binaryData[k]: Invalid value: "k": duplicate of key present in data; a key may be in data or binaryData, not both`}},
		{"Secret data that is not base64", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: 'not base64!'}\n",
			[]string{"<nil>: Invalid value: cannot be decoded as v1 Secret: illegal base64 data at input byte 3"}},

		{"valid Ingress", `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  ingressClassName: flotilla
  tls: [{hosts: [web.example.com], secretName: web-tls}]
  rules:
  - host: web.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /api, pathType: Exact, backend: {service: {name: api, port: {name: http}}}}
`, nil},
		{"Ingress path without pathType, backend without port", `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  rules:
  - host: web.example.com
    http:
      paths:
      - {path: /, backend: {service: {name: web}}}
`, []string{"spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified",
			"spec.rules[0].http.paths[0].backend.service.port: Required value: port name or number is required"}},
		{"Ingress with an invalid host", `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  rules:
  - host: Web_Example.com
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
`, []string{`spec.rules[0].host: Invalid value: "Web_Example.com": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},

		// A cluster-scoped object is sent without its namespace.
		{"Namespace with a namespace", "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo, namespace: other}\n", nil},
		{"autoscaling/v1 HorizontalPodAutoscaler", "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: web}\nspec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, maxReplicas: 3, targetCPUUtilizationPercentage: 50}\n", nil},
		{"APIService", "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1beta1.metrics.example.com}\nspec: {group: metrics.example.com, version: v1beta1, groupPriorityMinimum: 100, versionPriority: 100, service: {name: metrics, namespace: kube-system}}\n", nil},
		{"CustomResourceDefinition without a schema", "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Namespaced, names: {plural: widgets, kind: Widget}, versions: [{name: v1, served: true, storage: true}]}\n",
			[]string{"spec.versions[0].schema.openAPIV3Schema: Required value"}},
		{"generateName only", "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: cfg-}\n",
			[]string{"metadata.name: Required value: server-side apply needs a name; generateName is not used"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := offlineObj(t, tt.obj)
			before := obj.DeepCopy()
			var got []string
			for _, e := range ValidateOffline(obj) {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
			if !equalJSON(t, obj, before) {
				t.Error("ValidateOffline changed its argument")
			}
		})
	}
}

func equalJSON(t *testing.T, a, b *unstructured.Unstructured) bool {
	t.Helper()
	ja, err := a.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	jb, err := b.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

// TestValidateOfflineSpecManifests runs the manifests the API acceptance tests apply to a real
// agent (test/api/testdata/spec) through ValidateOffline: what the API accepts must pass.
func TestValidateOfflineSpecManifests(t *testing.T) {
	// Refused by the API, and offline too.
	invalid := map[string]string{
		"svcnet-B.35-secret-testsecret-tls.yaml": "illegal base64 data",
	}
	// Refused by an agent with the default --service-cidr only: the site's range is not
	// known offline.
	siteRange := map[string]bool{
		"concepts-A.30-loadbalancer-with-status.yaml":       true,
		"svcnet-B.05-service-loadbalancer-with-status.yaml": true,
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "test", "api", "testdata", "spec", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("found %d manifests in test/api/testdata/spec", len(files))
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var msgs []string
			n := 0
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
			for {
				u := &unstructured.Unstructured{}
				if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				if len(u.Object) == 0 {
					continue
				}
				n++
				for _, e := range ValidateOffline(u) {
					msgs = append(msgs, u.GetKind()+" "+u.GetName()+": "+e.Error())
				}
			}
			if n == 0 {
				t.Fatal("no objects")
			}
			got := strings.Join(msgs, "\n")
			switch want, bad := invalid[name]; {
			case bad && !strings.Contains(got, want):
				t.Errorf("want an error with %q, got:\n%s", want, got)
			case !bad && got != "":
				t.Errorf("the API accepts it (site range: %v), ValidateOffline refuses it:\n%s", siteRange[name], got)
			}
		})
	}
}
