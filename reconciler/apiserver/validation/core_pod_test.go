package validation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Valid pods: example manifests from the Kubernetes documentation.
var corePodFixtures = map[string]string{
	"simple-pod": `
apiVersion: v1
kind: Pod
metadata:
  name: nginx
spec:
  containers:
  - name: nginx
    image: nginx:1.14.2
    ports:
    - containerPort: 80
`,
	"pod1": `
apiVersion: v1
kind: Pod
metadata:
  name: pod1
  labels:
    tier: frontend
spec:
  containers:
  - name: hello1
    image: gcr.io/google-samples/hello-app:2.0
`,
	"nginx-demo": `
apiVersion: v1
kind: Pod
metadata:
  name: nginx-demo
spec:
  containers:
  - name: nginx
    image: nginx:1.7.9
    ports:
    - containerPort: 80
`,
	"foo with imagePullSecrets": `
apiVersion: v1
kind: Pod
metadata:
  name: foo
  namespace: awesomeapps
spec:
  containers:
    - name: foo
      image: janedoe/awesomeapp:v1
  imagePullSecrets:
    - name: myregistrykey
`,
	"nginx named port": `
apiVersion: v1
kind: Pod
metadata:
  name: nginx
  labels:
    app.kubernetes.io/name: proxy
spec:
  containers:
  - name: nginx
    image: nginx:stable
    ports:
      - containerPort: 80
        name: http-web-svc
`,
	"busybox1 hostname/subdomain": `
apiVersion: v1
kind: Pod
metadata:
  name: busybox1
  labels:
    name: busybox
spec:
  hostname: busybox-1
  subdomain: busybox-subdomain
  containers:
  - image: busybox:1.28
    command:
      - sleep
      - "3600"
    name: busybox
`,
	"hostNetwork ClusterFirstWithHostNet": `
apiVersion: v1
kind: Pod
metadata:
  name: busybox
  namespace: default
spec:
  containers:
  - image: busybox:1.28
    command:
      - sleep
      - "3600"
    imagePullPolicy: IfNotPresent
    name: busybox
  restartPolicy: Always
  hostNetwork: true
  dnsPolicy: ClusterFirstWithHostNet
`,
	"custom-dns": `
apiVersion: v1
kind: Pod
metadata:
  namespace: default
  name: dns-example
spec:
  containers:
    - name: test
      image: nginx
  dnsPolicy: "None"
  dnsConfig:
    nameservers:
      - 192.0.2.1 # this is an example
    searches:
      - ns1.svc.cluster-domain.example
      - my.dns.search.suffix
    options:
      - name: ndots
        value: "2"
      - name: edns0
`,
	"restartPolicyRules": `
apiVersion: v1
kind: Pod
metadata:
  name: example-pod
spec:
  containers:
  - name: main
    image: registry.k8s.io/busybox:1.27.2
    restartPolicy: Never
    restartPolicyRules:
    - action: RestartAllContainers
      exitCodes:
        operator: In
        values: [42]
`,
	"defaulted full pod": `
apiVersion: v1
kind: Pod
metadata:
  name: full
  labels: {app: web}
  annotations: {example.com/owner: team-a}
spec:
  restartPolicy: OnFailure
  dnsPolicy: ClusterFirst
  terminationGracePeriodSeconds: 30
  activeDeadlineSeconds: 600
  schedulerName: default-scheduler
  serviceAccountName: default
  priority: 1000
  priorityClassName: high
  nodeSelector: {kubernetes.io/os: linux}
  securityContext: {runAsUser: 1000, runAsGroup: 1000, fsGroup: 2000, runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  tolerations:
  - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 300}
  - {key: dedicated, operator: Equal, value: edge, effect: NoSchedule}
  - {operator: Exists}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 10
        preference:
          matchExpressions: [{key: disk, operator: Exists}]
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector: {matchLabels: {app: web}}
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}
  volumes:
  - name: data
    emptyDir: {sizeLimit: 1Gi}
  - name: config
    configMap: {name: web-config, items: [{key: app.conf, path: conf/app.conf}]}
  - name: creds
    secret: {secretName: web-creds, defaultMode: 0400}
  - name: claim
    persistentVolumeClaim: {claimName: web-data}
  - name: info
    downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}
  - name: token
    projected: {sources: [{serviceAccountToken: {path: token, expirationSeconds: 3600}}, {configMap: {name: ca}}]}
  initContainers:
  - name: init
    image: busybox:1.28
    command: [sh, -c, "true"]
  - name: sidecar
    image: envoy:1.30
    restartPolicy: Always
    readinessProbe: {tcpSocket: {port: 9901}}
  containers:
  - name: web
    image: nginx:1.27
    imagePullPolicy: IfNotPresent
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
    ports:
    - {name: http, containerPort: 8080, protocol: TCP}
    - {name: metrics, containerPort: 9090, protocol: TCP, hostPort: 9090}
    env:
    - {name: MODE, value: production}
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: MEM, valueFrom: {resourceFieldRef: {resource: limits.memory}}}
    - {name: PASSWORD, valueFrom: {secretKeyRef: {name: web-creds, key: password}}}
    envFrom:
    - {prefix: CFG_, configMapRef: {name: web-config}}
    resources:
      requests: {cpu: 100m, memory: 128Mi}
      limits: {cpu: "1", memory: 256Mi}
    volumeMounts:
    - {name: data, mountPath: /data}
    - {name: config, mountPath: /etc/web, readOnly: true}
    livenessProbe: {httpGet: {path: /healthz, port: http, scheme: HTTP}, periodSeconds: 10, successThreshold: 1, failureThreshold: 3}
    readinessProbe: {httpGet: {path: /ready, port: 8080}, successThreshold: 2}
    startupProbe: {exec: {command: [cat, /tmp/ready]}, failureThreshold: 30}
    lifecycle:
      preStop: {sleep: {seconds: 5}}
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`,
}

func TestCorePodFixturesValid(t *testing.T) {
	f := coreFuncs(t, "Pod", DefaultOptions())
	for name, manifest := range corePodFixtures {
		t.Run(name, func(t *testing.T) {
			pod := coreFixture[corev1.Pod](t, manifest)
			coreCheck(t, f.Create(pod))
		})
	}
}

func TestCorePodTemplateSpecFixtures(t *testing.T) {
	// Job hello: the pod template of a Job.
	job := `
spec:
  template:
    spec:
      containers:
      - name: hello
        image: busybox:1.28
        command: ['sh', '-c', 'echo "Hello, Kubernetes!" && sleep 3600']
      restartPolicy: OnFailure
`
	var holder struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict([]byte(job), &holder); err != nil {
		t.Fatal(err)
	}
	tp := field.NewPath("spec", "template")
	coreCheck(t, ValidatePodTemplateSpec(&holder.Spec.Template, tp))

	holder.Spec.Template.Labels = map[string]string{"bad key!": "x"}
	holder.Spec.Template.Spec.Containers[0].Name = "Hello"
	coreCheck(t, ValidatePodTemplateSpec(&holder.Spec.Template, tp),
		cInv("spec.template.metadata.labels"), cInv("spec.template.spec.containers[0].name"))

	coreCheck(t, ValidatePodTemplateSpec(nil, tp), cReq("spec.template"))
}

func corePodBase(t *testing.T) *corev1.Pod {
	return coreFixture[corev1.Pod](t, corePodFixtures["defaulted full pod"])
}

func TestCorePodInvalid(t *testing.T) {
	f := coreFuncs(t, "Pod", DefaultOptions())
	cases := []struct {
		name   string
		mutate func(p *corev1.Pod)
		want   []coreWant
	}{
		{"name not a DNS subdomain", func(p *corev1.Pod) { p.Name = "Web_1" }, []coreWant{cInv("metadata.name")}},
		{"missing namespace", func(p *corev1.Pod) { p.Namespace = "" }, []coreWant{cReq("metadata.namespace")}},
		{"bad label value", func(p *corev1.Pod) { p.Labels["app"] = "-web" }, []coreWant{cInv("metadata.labels")}},
		{"no containers", func(p *corev1.Pod) { p.Spec.Containers = nil }, []coreWant{cReq("spec.containers")}},
		{"container name not a DNS label", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "Web" }, []coreWant{cInv("spec.containers[0].name")}},
		{"container name duplicates an init container", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "init" }, []coreWant{cDup("spec.containers[0].name")}},
		{"container name missing", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "" }, []coreWant{cReq("spec.containers[0].name")}},
		{"image missing", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, []coreWant{cReq("spec.containers[0].image")}},
		{"image with spaces", func(p *corev1.Pod) { p.Spec.Containers[0].Image = " nginx" }, []coreWant{cInv("spec.containers[0].image")}},
		{"containerPort 0", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 0 }, []coreWant{cReq("spec.containers[0].ports[0].containerPort")}},
		{"containerPort too big", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 70000 }, []coreWant{cInv("spec.containers[0].ports[0].containerPort")}},
		{"hostPort too big", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[1].HostPort = 65536 }, []coreWant{cInv("spec.containers[0].ports[1].hostPort")}},
		{"port name not IANA", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Name = "http_web" }, []coreWant{cInv("spec.containers[0].ports[0].name")}},
		{"port name duplicate", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[1].Name = "http" }, []coreWant{cDup("spec.containers[0].ports[1].name")}},
		{"protocol unknown", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = "ICMP" }, []coreWant{cNsup("spec.containers[0].ports[0].protocol")}},
		{"same hostPort twice", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: 9091, HostPort: 9090, Protocol: corev1.ProtocolTCP})
		}, []coreWant{cDup("spec.containers[0].ports[2].hostPort")}},
		{"hostNetwork with hostPort != containerPort", func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Containers[0].Ports[1].HostPort = 19090
		}, []coreWant{cInv("spec.containers[0].ports[1].hostPort")}},
		{"env name with =", func(p *corev1.Pod) { p.Spec.Containers[0].Env[0].Name = "A=B" }, []coreWant{cInv("spec.containers[0].env[0].name")}},
		{"env value and valueFrom", func(p *corev1.Pod) { p.Spec.Containers[0].Env[1].Value = "x" }, []coreWant{cInv("spec.containers[0].env[1].valueFrom")}},
		{"env fieldRef unsupported", func(p *corev1.Pod) { p.Spec.Containers[0].Env[1].ValueFrom.FieldRef.FieldPath = "spec.hostname" }, []coreWant{cNsup("spec.containers[0].env[1].valueFrom.fieldRef.fieldPath")}},
		{"env secretKeyRef without key", func(p *corev1.Pod) { p.Spec.Containers[0].Env[3].ValueFrom.SecretKeyRef.Key = "" }, []coreWant{cReq("spec.containers[0].env[3].valueFrom.secretKeyRef.key")}},
		{"envFrom both sources", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom[0].SecretRef = &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}
		}, []coreWant{cInv("spec.containers[0].envFrom[0]")}},
		{"volume names duplicate", func(p *corev1.Pod) { p.Spec.Volumes[1].Name = "data" }, []coreWant{cDup("spec.volumes[1].name"), cNotF("spec.containers[0].volumeMounts[1].name")}},
		{"volume without source", func(p *corev1.Pod) { p.Spec.Volumes[0].EmptyDir = nil }, []coreWant{cReq("spec.volumes[0]")}},
		{"volume with two sources", func(p *corev1.Pod) {
			p.Spec.Volumes[0].HostPath = &corev1.HostPathVolumeSource{Path: "/data"}
		}, []coreWant{cForb("spec.volumes[0]")}},
		{"configMap volume path with ..", func(p *corev1.Pod) { p.Spec.Volumes[1].ConfigMap.Items[0].Path = "../etc/passwd" }, []coreWant{cInv("spec.volumes[1].configMap.items[0].path")}},
		{"secret defaultMode too big", func(p *corev1.Pod) { p.Spec.Volumes[2].Secret.DefaultMode = ptr.To[int32](01000) }, []coreWant{cInv("spec.volumes[2].secret.defaultMode")}},
		{"pvc without claimName", func(p *corev1.Pod) { p.Spec.Volumes[3].PersistentVolumeClaim.ClaimName = "" }, []coreWant{cReq("spec.volumes[3].persistentVolumeClaim.claimName")}},
		{"mount of unknown volume", func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].Name = "cache" }, []coreWant{cNotF("spec.containers[0].volumeMounts[0].name")}},
		{"mountPath twice", func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[1].MountPath = "/data" }, []coreWant{cInv("spec.containers[0].volumeMounts[1].mountPath")}},
		{"request above limit", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("512Mi")
		}, []coreWant{cInv("spec.containers[0].resources.requests[memory]")}},
		{"negative limit", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("-1")
		}, []coreWant{cInv("spec.containers[0].resources.limits[cpu]")}},
		{"unknown unprefixed resource", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits["gpu"] = resource.MustParse("1")
		}, []coreWant{cInv("spec.containers[0].resources.limits[gpu]")}},
		{"probe without handler", func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe.HTTPGet = nil }, []coreWant{cReq("spec.containers[0].livenessProbe")}},
		{"probe with two handlers", func(p *corev1.Pod) {
			p.Spec.Containers[0].StartupProbe.TCPSocket = &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}
		}, []coreWant{cForb("spec.containers[0].startupProbe")}},
		{"liveness successThreshold 2", func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe.SuccessThreshold = 2 }, []coreWant{cInv("spec.containers[0].livenessProbe.successThreshold")}},
		{"negative periodSeconds", func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe.PeriodSeconds = -1 }, []coreWant{cInv("spec.containers[0].livenessProbe.periodSeconds")}},
		{"httpGet port out of range", func(p *corev1.Pod) { p.Spec.Containers[0].ReadinessProbe.HTTPGet.Port = intstr.FromInt32(0) }, []coreWant{cReq("spec.containers[0].readinessProbe.httpGet.port")}},
		{"readiness probe with grace period", func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe.TerminationGracePeriodSeconds = ptr.To[int64](5)
		}, []coreWant{cInv("spec.containers[0].readinessProbe.terminationGracePeriodSeconds")}},
		{"init container with probe", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
		}, []coreWant{cForb("spec.initContainers[0].livenessProbe")}},
		{"init container restartPolicy Never", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
		}, []coreWant{cNsup("spec.initContainers[0].restartPolicy")}},
		{"restartPolicyRules without container restartPolicy", func(p *corev1.Pod) {
			p.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{1}}}}
		}, []coreWant{cReq("spec.containers[0].restartPolicy")}},
		{"pod restartPolicy unknown", func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" }, []coreWant{cNsup("spec.restartPolicy")}},
		{"dnsPolicy unknown", func(p *corev1.Pod) { p.Spec.DNSPolicy = "Cluster" }, []coreWant{cNsup("spec.dnsPolicy")}},
		{"dnsPolicy None without dnsConfig", func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSNone }, []coreWant{cReq("spec.dnsConfig")}},
		{"dnsConfig with 4 nameservers", func(p *corev1.Pod) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"}}
		}, []coreWant{cInv("spec.dnsConfig.nameservers")}},
		{"dnsConfig bad nameserver", func(p *corev1.Pod) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"dns.example"}}
		}, []coreWant{cInv("spec.dnsConfig.nameservers[0]")}},
		{"negative grace period", func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](-1) }, []coreWant{cInv("spec.terminationGracePeriodSeconds")}},
		{"activeDeadlineSeconds 0", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](0) }, []coreWant{cInv("spec.activeDeadlineSeconds")}},
		{"hostname not a DNS label", func(p *corev1.Pod) { p.Spec.Hostname = "web.1" }, []coreWant{cInv("spec.hostname")}},
		{"subdomain not a DNS label", func(p *corev1.Pod) { p.Spec.Subdomain = "Sub" }, []coreWant{cInv("spec.subdomain")}},
		{"toleration Exists with value", func(p *corev1.Pod) { p.Spec.Tolerations[0].Value = "x" }, []coreWant{cInv("spec.tolerations[0].value")}},
		{"toleration empty key with Equal", func(p *corev1.Pod) { p.Spec.Tolerations[2].Operator = corev1.TolerationOpEqual }, []coreWant{cInv("spec.tolerations[2].operator")}},
		{"tolerationSeconds without NoExecute", func(p *corev1.Pod) { p.Spec.Tolerations[1].TolerationSeconds = ptr.To[int64](10) }, []coreWant{cInv("spec.tolerations[1].effect")}},
		{"toleration effect unknown", func(p *corev1.Pod) { p.Spec.Tolerations[1].Effect = "NoRun" }, []coreWant{cNsup("spec.tolerations[1].effect")}},
		{"nodeSelector bad key", func(p *corev1.Pod) { p.Spec.NodeSelector["bad key"] = "x" }, []coreWant{cInv("spec.nodeSelector")}},
		{"node affinity In without values", func(p *corev1.Pod) {
			p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values = nil
		}, []coreWant{cReq("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values")}},
		{"node affinity bad operator", func(p *corev1.Pod) {
			p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Operator = "Like"
		}, []coreWant{cNsup("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator")}},
		{"preferred weight 0", func(p *corev1.Pod) {
			p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].Weight = 0
		}, []coreWant{cInv("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight")}},
		{"pod anti-affinity without topologyKey", func(p *corev1.Pod) {
			p.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey = ""
		}, []coreWant{cReq("spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey")}},
		{"topology spread maxSkew 0", func(p *corev1.Pod) { p.Spec.TopologySpreadConstraints[0].MaxSkew = 0 }, []coreWant{cInv("spec.topologySpreadConstraints[0].maxSkew")}},
		{"scheduling gate duplicate", func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/wait"}, {Name: "example.com/wait"}}
		}, []coreWant{cDup("spec.schedulingGates[1].name")}},
		{"scheduling gates with nodeName", func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/wait"}}
			p.Spec.NodeName = "edge-1"
		}, []coreWant{cForb("spec.nodeName")}},
		{"runAsUser negative", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = ptr.To[int64](-1) }, []coreWant{cInv("spec.securityContext.runAsUser")}},
		{"privileged without escalation", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true) }, []coreWant{cInv("spec.containers[0].securityContext.allowPrivilegeEscalation")}},
		{"seccomp Localhost without profile", func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}
		}, []coreWant{cReq("spec.securityContext.seccompProfile.localhostProfile")}},
		{"ephemeral containers on create", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
		}, []coreWant{cForb("spec.ephemeralContainers")}},
		{"preemptionPolicy unknown", func(p *corev1.Pod) { p.Spec.PreemptionPolicy = ptr.To[corev1.PreemptionPolicy]("Sometimes") }, []coreWant{cNsup("spec.preemptionPolicy")}},
		{"os name unknown", func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: "plan9"} }, []coreWant{cNsup("spec.os.name")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := corePodBase(t)
			tc.mutate(pod)
			coreCheck(t, f.Create(pod), tc.want...)
		})
	}
}

func corePodStored(t *testing.T) *corev1.Pod {
	p := corePodBase(t)
	p.ResourceVersion = "42"
	p.UID = "7e0e2b2e-0000-4000-8000-000000000001"
	return p
}

func TestCorePodUpdate(t *testing.T) {
	f := coreFuncs(t, "Pod", DefaultOptions())
	cases := []struct {
		name   string
		old    func(p *corev1.Pod)
		mutate func(p *corev1.Pod)
		want   []coreWant
	}{
		{"no change", nil, func(p *corev1.Pod) {}, nil},
		{"labels may change", nil, func(p *corev1.Pod) { p.Labels["track"] = "canary" }, nil},
		{"image may change", nil, func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "nginx:1.28"
			p.Spec.InitContainers[1].Image = "envoy:1.31"
		}, nil},
		{"activeDeadlineSeconds may decrease", nil, func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](60) }, nil},
		{"activeDeadlineSeconds may be set", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = nil }, func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](60) }, nil},
		{"activeDeadlineSeconds may not increase", nil, func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](6000) }, []coreWant{cInv("spec.activeDeadlineSeconds")}},
		{"activeDeadlineSeconds may not be unset", nil, func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = nil }, []coreWant{cInv("spec.activeDeadlineSeconds")}},
		{"tolerations may be added", nil, func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists})
		}, nil},
		{"tolerations may not be removed", nil, func(p *corev1.Pod) { p.Spec.Tolerations = p.Spec.Tolerations[1:] }, []coreWant{cForb("spec.tolerations")}},
		{"grace period may change", nil, func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1) }, nil},
		{"scheduling gate may be removed", func(p *corev1.Pod) { p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/wait"}} },
			func(p *corev1.Pod) { p.Spec.SchedulingGates = nil }, nil},
		{"scheduling gate may not be added", nil, func(p *corev1.Pod) { p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/wait"}} },
			[]coreWant{cForb("spec.schedulingGates[0]")}},
		{"nodeSelector may grow while gated", func(p *corev1.Pod) { p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/wait"}} },
			func(p *corev1.Pod) { p.Spec.NodeSelector["zone"] = "a" }, nil},
		{"ports may not change", nil, func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 8081 }, []coreWant{cForb("spec")}},
		{"containers may not be added", nil, func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "extra", Image: "busybox"})
		}, []coreWant{cForb("spec")}},
		{"nodeName may be set once", nil, func(p *corev1.Pod) { p.Spec.NodeName = "edge-1" }, nil},
		{"nodeName may not change", func(p *corev1.Pod) { p.Spec.NodeName = "edge-1" }, func(p *corev1.Pod) { p.Spec.NodeName = "edge-2" }, []coreWant{cForb("spec.nodeName")}},
		{"name is immutable", nil, func(p *corev1.Pod) { p.Name = "other" }, []coreWant{cInv("metadata.name")}},
		{"resourceVersion required", nil, func(p *corev1.Pod) { p.ResourceVersion = "" }, []coreWant{cInv("metadata.resourceVersion")}},
		{"no new finalizer while deleting", func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now },
			func(p *corev1.Pod) { p.Finalizers = []string{"example.com/keep"} }, []coreWant{cForb("metadata.finalizers")}},
		{"image may not be emptied", nil, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, []coreWant{cReq("spec.containers[0].image")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := corePodStored(t)
			if tc.old != nil {
				tc.old(old)
			}
			pod := old.DeepCopy()
			tc.mutate(pod)
			coreCheck(t, f.Update(pod, old), tc.want...)
		})
	}
}

func TestCorePodUpdateMessage(t *testing.T) {
	old := corePodStored(t)
	pod := old.DeepCopy()
	pod.Spec.Containers[0].Ports[0].ContainerPort = 8081
	pod.Spec.Volumes = pod.Spec.Volumes[:1]
	pod.Spec.Containers[0].VolumeMounts = pod.Spec.Containers[0].VolumeMounts[:1]
	errs := coreFuncs(t, "Pod", DefaultOptions()).Update(pod, old)
	if len(errs) != 1 {
		t.Fatalf("want one error, got %v", errs)
	}
	msg := errs[0].Error()
	for _, want := range []string{
		"spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`",
		"spec.volumes", "spec.containers[0].ports", "spec.containers[0].volumeMounts",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not contain %q", msg, want)
		}
	}
}

func TestCorePodStatusUpdate(t *testing.T) {
	f := coreFuncs(t, "Pod", DefaultOptions())
	old := corePodStored(t)
	ok := old.DeepCopy()
	ok.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5", PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}, HostIP: "192.0.2.10",
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true}}}
	coreCheck(t, f.StatusUpdate(ok, old))

	bad := ok.DeepCopy()
	bad.Status.Phase = "Sleeping"
	bad.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "10.244.1.5"}}
	bad.Status.ContainerStatuses[0].Name = "nope"
	coreCheck(t, f.StatusUpdate(bad, old), cNsup("status.phase"), cDup("status.podIPs[1].ip"), cNotF("status.containerStatuses[0].name"))

	done := ok.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	back := done.DeepCopy()
	back.Status.Phase = corev1.PodRunning
	coreCheck(t, f.StatusUpdate(back, done), cForb("status.phase"))
}

func TestCorePodTemplateSpecWithClaimTemplates(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres:16",
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/postgresql"}}}}},
	}
	tp := field.NewPath("spec", "template")
	claims := []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}}
	coreCheck(t, ValidatePodTemplateSpecWithClaimTemplates(tmpl, claims, tp))
	coreCheck(t, ValidatePodTemplateSpec(tmpl, tp), cNotF("spec.template.spec.containers[0].volumeMounts[0].name"))
}
