package api

import (
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/test/framework"
)

const podTemplate = `
  template:
    metadata:
      labels:
        app: a
    spec:
      containers:
      - name: c
        image: busybox
`

// TestInvalidObjectsAreRejected sends objects Kubernetes calls invalid through kubectl; each must
// be refused with 422 (kubectl prints "is invalid") and a message that names the field.
func TestInvalidObjectsAreRejected(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{})
	cases := []struct {
		name, manifest, field string
	}{
		{"uppercase configmap name", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n", "metadata.name"},
		{"namespace name with dots", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a.b\n", "metadata.name"},
		{"service name starting with a digit", "apiVersion: v1\nkind: Service\nmetadata:\n  name: 1svc\nspec:\n  ports:\n  - port: 80\n", "metadata.name"},
		{"label value too long", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: l\n  labels:\n    a: " + strings.Repeat("x", 64) + "\n", "metadata.labels"},
		{"pod without containers", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers: []\n", "spec.containers"},
		{"pod container without image", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n", "spec.containers[0].image"},
		{"pod duplicate container names", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: a\n  - name: c\n    image: b\n", "spec.containers[1].name"},
		{"pod bad restartPolicy", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  restartPolicy: Sometimes\n  containers:\n  - name: c\n    image: a\n", "spec.restartPolicy"},
		{"pod container port out of range", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: a\n    ports:\n    - containerPort: 70000\n", "spec.containers[0].ports[0].containerPort"},
		{"pod requests above limits", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: a\n    resources:\n      requests:\n        cpu: \"2\"\n      limits:\n        cpu: \"1\"\n", "spec.containers[0].resources.requests"},
		{"pod volume mount of unknown volume", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: a\n    volumeMounts:\n    - name: nope\n      mountPath: /x\n", "spec.containers[0].volumeMounts[0].name"},
		{"replicaset restartPolicy OnFailure", "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: rs\nspec:\n  selector:\n    matchLabels:\n      app: a\n" + podTemplate + "      restartPolicy: OnFailure\n", "spec.template.spec.restartPolicy"},
		{"deployment selector not matching template labels", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  selector:\n    matchLabels:\n      app: other\n" + podTemplate, "spec.template.metadata.labels"},
		{"deployment without selector", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n" + podTemplate, "spec.selector"},
		{"deployment negative replicas", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  replicas: -1\n  selector:\n    matchLabels:\n      app: a\n" + podTemplate, "spec.replicas"},
		{"deployment maxSurge and maxUnavailable zero", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  strategy:\n    rollingUpdate:\n      maxSurge: 0\n      maxUnavailable: 0\n  selector:\n    matchLabels:\n      app: a\n" + podTemplate, "spec.strategy.rollingUpdate.maxUnavailable"},
		{"statefulset bad podManagementPolicy", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: s\nspec:\n  podManagementPolicy: Random\n  serviceName: s\n  selector:\n    matchLabels:\n      app: a\n" + podTemplate, "spec.podManagementPolicy"},
		{"job restartPolicy Always", "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\nspec:\n" + podTemplate + "      restartPolicy: Always\n", "spec.template.spec.restartPolicy"},
		{"cronjob bad schedule", "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: cj\nspec:\n  schedule: \"not a schedule\"\n  jobTemplate:\n    spec:\n" + strings.ReplaceAll(podTemplate, "\n  ", "\n      ") + "          restartPolicy: Never\n", "spec.schedule"},
		{"service clusterIP outside the range", "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  clusterIP: 192.168.1.1\n  ports:\n  - port: 80\n", "spec.clusterIP"},
		{"service duplicate port names", "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  ports:\n  - name: http\n    port: 80\n  - name: http\n    port: 81\n", "spec.ports[1].name"},
		{"service unnamed ports when several", "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  ports:\n  - port: 80\n  - port: 81\n", "spec.ports[0].name"},
		{"service port zero", "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  ports:\n  - port: 0\n", "spec.ports[0].port"},
		{"service nodePort outside the range", "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  type: NodePort\n  ports:\n  - port: 80\n    nodePort: 80\n", "spec.ports[0].nodePort"},
		{"ingress path without pathType", "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: i\nspec:\n  rules:\n  - http:\n      paths:\n      - path: /\n        backend:\n          service:\n            name: s\n            port:\n              number: 80\n", "pathType"},
		{"ingress relative Prefix path", "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: i\nspec:\n  rules:\n  - http:\n      paths:\n      - path: foo\n        pathType: Prefix\n        backend:\n          service:\n            name: s\n            port:\n              number: 80\n", "spec.rules[0].http.paths[0].path"},
		{"configmap bad key", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  \"a/b\": x\n", "data[a/b]"},
		{"tls secret without tls.key", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ntype: kubernetes.io/tls\ndata:\n  tls.crt: YQ==\n", "data[tls.key]"},
		{"pdb with both minAvailable and maxUnavailable", "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: p\nspec:\n  minAvailable: 1\n  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app: a\n", "spec"},
		{"networkpolicy bad ipBlock", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: np1\nspec:\n  podSelector: {}\n  ingress:\n  - from:\n    - ipBlock:\n        cidr: not-a-cidr\n", "spec.ingress[0].from[0].ipBlock.cidr"},
		{"node taint with bad effect", "apiVersion: v1\nkind: Node\nmetadata:\n  name: node1\nspec:\n  taints:\n  - key: k\n    effect: Sometimes\n", "spec.taints[0].effect"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := a.Kubectl(tc.manifest, "create", "-f", "-")
			if err == nil {
				t.Fatalf("accepted, want 422 naming %s: %s", tc.field, out)
			}
			if !strings.Contains(errOut, "is invalid") || !strings.Contains(errOut, tc.field) {
				t.Errorf("error does not say invalid/%s:\n%s", tc.field, errOut)
			}
		})
	}
	if len(cases) < 20 {
		t.Fatalf("only %d cases", len(cases))
	}
}
