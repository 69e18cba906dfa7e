package agent

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "1234", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "host-1", Containers: []corev1.Container{{Name: "app", Image: "x",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}},
		Status: corev1.PodStatus{PodIP: "10.244.1.5", HostIP: "10.213.1.1"},
	}
}

func TestContainerEnv(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.EnvFrom = []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}}
	c.Env = []corev1.EnvVar{
		{Name: "A", Value: "1"},
		{Name: "B", Value: "$(A)-$(CFG_mode)-$(NOPE)-$$(A)"},
		{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
		{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		{Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
		{Name: "PASS", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "password"}}},
		{Name: "OPT", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}, Key: "k", Optional: ptr.To(true)}}},
	}
	src := envSources{
		ConfigMap: func(ns, name string) (*corev1.ConfigMap, error) {
			return &corev1.ConfigMap{Data: map[string]string{"mode": "edge"}}, nil
		},
		Secret: func(ns, name string) (*corev1.Secret, error) {
			switch name {
			case "missing":
				return nil, errNotThere
			case "refused":
				return nil, apierrors.NewForbidden(corev1.Resource("secrets"), name, errors.New("no relationship found"))
			}
			return &corev1.Secret{Data: map[string][]byte{"password": []byte("s3cret")}}, nil
		},
		Services: []*corev1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "redis-master"}, Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.11",
			Ports: []corev1.ServicePort{{Name: "tcp", Port: 6379, Protocol: corev1.ProtocolTCP}}}}},
	}
	env, err := containerEnv(pod, c, src)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	want := map[string]string{
		"A": "1", "B": "1-edge-$(NOPE)-$(A)", "POD": "web-0", "APP": "web", "IP": "10.244.1.5", "MEM": "64", "CPU": "1",
		"PASS": "s3cret", "CFG_mode": "edge",
		// The docker-links variables of Service redis-master, as Kubernetes documents them.
		"REDIS_MASTER_SERVICE_HOST": "10.0.0.11", "REDIS_MASTER_SERVICE_PORT": "6379", "REDIS_MASTER_SERVICE_PORT_TCP": "6379",
		"REDIS_MASTER_PORT": "tcp://10.0.0.11:6379", "REDIS_MASTER_PORT_6379_TCP": "tcp://10.0.0.11:6379",
		"REDIS_MASTER_PORT_6379_TCP_PROTO": "tcp", "REDIS_MASTER_PORT_6379_TCP_PORT": "6379", "REDIS_MASTER_PORT_6379_TCP_ADDR": "10.0.0.11",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["OPT"]; ok {
		t.Error("an optional missing secret must leave the variable unset")
	}
	// An optional Secret that cannot be read yet (the API server has not seen the pod on
	// this host) is retried, not left out.
	opt := *c
	opt.Env = append(append([]corev1.EnvVar(nil), c.Env...), corev1.EnvVar{Name: "LATER", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "refused"}, Key: "k", Optional: ptr.To(true)}}})
	if _, err := containerEnv(pod, &opt, src); !apierrors.IsForbidden(err) {
		t.Errorf("an optional secret refused must fail, got %v", err)
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: "BAD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}, Key: "k"}}})
	if _, err := containerEnv(pod, c, src); err == nil || !strings.Contains(err.Error(), `secret "missing"`) {
		t.Errorf("a required missing secret must fail naming it, got %v", err)
	}
}

// errNotThere is what the object caches answer for an object that does not exist.
var errNotThere error = apierrors.NewNotFound(corev1.Resource("secrets"), "missing")

func TestResolvConf(t *testing.T) {
	host := parseResolvConf("nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n")
	pod := testPod()
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.Pod)
		want   string
	}{
		{"ClusterFirst", func(p *corev1.Pod) {},
			"nameserver 10.96.0.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local corp.example\noptions ndots:5\n"},
		{"Default", func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSDefault },
			"nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"},
		{"hostNetwork falls back to Default", func(p *corev1.Pod) { p.Spec.HostNetwork = true },
			"nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"},
		// The dnsConfig example of the Kubernetes documentation (pod DNS config).
		{"None with dnsConfig", func(p *corev1.Pod) {
			p.Spec.DNSPolicy = corev1.DNSNone
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.1"}, Searches: []string{"ns1.svc.cluster-domain.example", "my.dns.search.suffix"},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}}}
		}, "nameserver 192.0.2.1\nsearch ns1.svc.cluster-domain.example my.dns.search.suffix\noptions ndots:2 edns0\n"},
		{"ClusterFirst with ndots override", func(p *corev1.Pod) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}}}
		}, "nameserver 10.96.0.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local corp.example\noptions ndots:1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod.DeepCopy()
			tc.mutate(p)
			if got := resolvConf(p, "10.96.0.10", "cluster.local", host); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	p := pod.DeepCopy()
	p.Spec.Hostname, p.Spec.Subdomain = "busybox-1", "busybox-subdomain"
	p.Spec.HostAliases = []corev1.HostAlias{{IP: "127.0.0.1", Hostnames: []string{"foo.local", "bar.local"}}}
	hosts := etcHosts(p, []string{"10.244.1.5"}, "cluster.local")
	for _, want := range []string{"10.244.1.5\tbusybox-1.busybox-subdomain.shop.svc.cluster.local\tbusybox-1\n", "127.0.0.1\tfoo.local\tbar.local\n"} {
		if !strings.Contains(hosts, want) {
			t.Errorf("/etc/hosts lacks %q:\n%s", want, hosts)
		}
	}
}

func exited(code int32, oom bool) *rt.ContainerStatus {
	return &rt.ContainerStatus{ID: "c", State: rt.StateExited, ExitCode: code, OOMKilled: oom, StartedAt: time.Unix(100, 0), FinishedAt: time.Unix(200, 0)}
}

func running() *rt.ContainerStatus {
	return &rt.ContainerStatus{ID: "c", State: rt.StateRunning, StartedAt: time.Unix(100, 0)}
}

func TestComputeStatusPhases(t *testing.T) {
	for _, tc := range []struct {
		name       string
		policy     corev1.RestartPolicy
		init       *containerObs
		app        *containerObs
		phase      corev1.PodPhase
		ready      bool
		stateCheck func(cs corev1.ContainerStatus) bool
	}{
		{"created, not started", corev1.RestartPolicyAlways, nil, &containerObs{}, corev1.PodPending, false,
			func(cs corev1.ContainerStatus) bool {
				return cs.State.Waiting != nil && cs.State.Waiting.Reason == "ContainerCreating"
			}},
		{"init running holds app in PodInitializing", corev1.RestartPolicyAlways, &containerObs{current: running()}, &containerObs{}, corev1.PodPending, false,
			func(cs corev1.ContainerStatus) bool {
				return cs.State.Waiting != nil && cs.State.Waiting.Reason == "PodInitializing"
			}},
		{"running and ready", corev1.RestartPolicyAlways, &containerObs{current: exited(0, false)}, &containerObs{current: running(), ready: true, started: true}, corev1.PodRunning, true,
			func(cs corev1.ContainerStatus) bool { return cs.State.Running != nil && cs.Ready }},
		{"running, readiness failing", corev1.RestartPolicyAlways, nil, &containerObs{current: running(), started: true}, corev1.PodRunning, false,
			func(cs corev1.ContainerStatus) bool { return cs.State.Running != nil && !cs.Ready }},
		{"Never + exit 0 = Succeeded", corev1.RestartPolicyNever, nil, &containerObs{current: exited(0, false)}, corev1.PodSucceeded, false,
			func(cs corev1.ContainerStatus) bool {
				return cs.State.Terminated != nil && cs.State.Terminated.Reason == "Completed"
			}},
		{"Never + OOM = Failed", corev1.RestartPolicyNever, nil, &containerObs{current: exited(137, true)}, corev1.PodFailed, false,
			func(cs corev1.ContainerStatus) bool {
				return cs.State.Terminated != nil && cs.State.Terminated.Reason == "OOMKilled" && cs.State.Terminated.ExitCode == 137
			}},
		{"Never + start error = Failed", corev1.RestartPolicyNever, nil,
			&containerObs{current: &rt.ContainerStatus{ID: "c", State: rt.StateExited, ExitCode: rt.StartErrorExitCode, FinishedAt: time.Unix(200, 0), StartError: `exec: "/x": no such file`}},
			corev1.PodFailed, false,
			func(cs corev1.ContainerStatus) bool {
				term := cs.State.Terminated
				return term != nil && term.Reason == "StartError" && term.ExitCode == 128 && term.Message == `exec: "/x": no such file` && term.StartedAt.IsZero()
			}},
		{"OnFailure + exit 0 = Succeeded", corev1.RestartPolicyOnFailure, nil, &containerObs{current: exited(0, false)}, corev1.PodSucceeded, false, nil},
		{"Always + crash = Running with CrashLoopBackOff", corev1.RestartPolicyAlways, nil,
			&containerObs{current: exited(1, false), previous: exited(1, false), attempt: 3, waitingReason: "CrashLoopBackOff", waitingMessage: "back-off 40s"}, corev1.PodRunning, false,
			func(cs corev1.ContainerStatus) bool {
				return cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" && cs.RestartCount == 3 &&
					cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.ExitCode == 1
			}},
		{"image pull error", corev1.RestartPolicyAlways, nil, &containerObs{waitingReason: "ErrImagePull", waitingMessage: "no registry"}, corev1.PodPending, false,
			func(cs corev1.ContainerStatus) bool {
				return cs.State.Waiting != nil && cs.State.Waiting.Reason == "ErrImagePull"
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.RestartPolicy = tc.policy
			obs := podObs{sandboxReady: true, podIPs: []string{"10.244.1.5"}, containers: map[string]*containerObs{"app": tc.app}}
			if tc.init != nil {
				pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "x"}}
				obs.containers["setup"] = tc.init
			}
			st := computeStatus(pod, obs, time.Now())
			if st.Phase != tc.phase {
				t.Errorf("phase %s, want %s", st.Phase, tc.phase)
			}
			ready := false
			for _, c := range st.Conditions {
				if c.Type == corev1.PodReady {
					ready = c.Status == corev1.ConditionTrue
				}
			}
			if ready != tc.ready {
				t.Errorf("Ready %v, want %v: %+v", ready, tc.ready, st.Conditions)
			}
			if tc.stateCheck != nil && !tc.stateCheck(st.ContainerStatuses[0]) {
				t.Errorf("container status %+v", st.ContainerStatuses[0])
			}
		})
	}
}

func TestComputeStatusKeepsTransitionTimes(t *testing.T) {
	pod := testPod()
	old := metav1.NewTime(time.Unix(1000, 0))
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: old},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: old},
	}
	st := computeStatus(pod, podObs{sandboxReady: true, containers: map[string]*containerObs{"app": {current: running()}}}, time.Unix(2000, 0))
	seen := map[corev1.PodConditionType]metav1.Time{}
	for _, c := range st.Conditions {
		seen[c.Type] = c.LastTransitionTime
	}
	if !seen[corev1.PodScheduled].Time.Equal(old.Time) || !seen[corev1.PodInitialized].Time.Equal(old.Time) {
		t.Errorf("unchanged conditions must keep their transition time: %+v", st.Conditions)
	}
	if seen[corev1.PodReady].Time != time.Unix(2000, 0) {
		t.Errorf("a new condition starts now: %+v", st.Conditions)
	}
}

func TestBuildContainerConfig(t *testing.T) {
	pod := testPod()
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000)), RunAsGroup: ptr.To(int64(3000))}
	c := &pod.Spec.Containers[0]
	c.Command = []string{"/app", "--name=$(NAME)"}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/cfg", ReadOnly: true}, {Name: "data", MountPath: "/data"}}
	c.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To(int64(2000)), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}}}
	cfg, err := buildContainerConfig(pod, c, containerParams{Attempt: 2, Env: []string{"NAME=shop"}, NetNSPath: "/run/ns",
		Volumes: map[string]string{"cfg": "/v/cfg", "data": "/v/data"}, PodDir: "/pods/1234", Domain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ID != containerID("1234", "app", 2) || len(cfg.ID) > 76 {
		t.Errorf("id %q", cfg.ID)
	}
	if cfg.Command[1] != "--name=shop" {
		t.Errorf("$(VAR) in command not expanded: %v", cfg.Command)
	}
	if cfg.User == nil || cfg.User.UID != 2000 || cfg.User.GID == nil || *cfg.User.GID != 3000 {
		t.Errorf("container runAsUser over the pod's, pod's runAsGroup kept: %+v", cfg.User)
	}
	if !cfg.ReadOnlyRootfs || cfg.CapAdd[0] != "NET_ADMIN" || cfg.CapDrop[0] != "ALL" {
		t.Errorf("security context: %+v", cfg)
	}
	if cfg.CPUQuota != 50000 || cfg.CPUPeriod != 100000 || cfg.CPUShares != 512 || cfg.MemoryLimit != 64<<20 {
		t.Errorf("resources: quota %d period %d shares %d memory %d", cfg.CPUQuota, cfg.CPUPeriod, cfg.CPUShares, cfg.MemoryLimit)
	}
	mounts := map[string]rt.Mount{}
	for _, m := range cfg.Mounts {
		mounts[m.Destination] = m
	}
	if m := mounts["/etc/cfg"]; m.Source != "/v/cfg" || !m.ReadOnly {
		t.Errorf("cfg mount %+v", m)
	}
	if m := mounts["/data"]; m.Source != "/v/data" || m.ReadOnly {
		t.Errorf("data mount %+v", m)
	}
	if m := mounts["/etc/resolv.conf"]; m.Source != "/pods/1234/resolv.conf" {
		t.Errorf("resolv.conf mount %+v", m)
	}
	if cfg.Env[0] != "HOSTNAME=web-0" {
		t.Errorf("HOSTNAME first: %v", cfg.Env)
	}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "nope", MountPath: "/x"})
	if _, err := buildContainerConfig(pod, c, containerParams{Volumes: map[string]string{"cfg": "a", "data": "b"}}); err == nil {
		t.Error("a mount of an unknown volume must fail")
	}
}

// setHostnameAsFQDN: with a subdomain the containers' hostname is the pod's fully qualified
// name; one longer than 64 characters refuses the pod, with what to change.
func TestContainerHostname(t *testing.T) {
	pod := testPod()
	pod.Spec.Hostname, pod.Spec.Subdomain = "web-0", "web"
	if h, err := containerHostname(pod, "cluster.local"); err != nil || h != "web-0" {
		t.Fatalf("without setHostnameAsFQDN: %q, %v", h, err)
	}
	pod.Spec.SetHostnameAsFQDN = ptrBool(true)
	want := "web-0.web." + pod.Namespace + ".svc.cluster.local"
	if h, err := containerHostname(pod, "cluster.local"); err != nil || h != want {
		t.Fatalf("setHostnameAsFQDN: %q, %v, want %q", h, err, want)
	}
	cfg, err := buildContainerConfig(pod, &pod.Spec.Containers[0], containerParams{Domain: "cluster.local"})
	if err != nil || cfg.Hostname != want || !slices.Contains(cfg.Env, "HOSTNAME="+want) {
		t.Fatalf("container config: hostname %q env %v, %v", cfg.Hostname, cfg.Env, err)
	}
	pod.Spec.Subdomain = strings.Repeat("s", 40)
	if _, err := containerHostname(pod, "cluster.local"); err == nil || !strings.Contains(err.Error(), "too long (64 characters is the max") {
		t.Fatalf("a 90-character FQDN: %v", err)
	}
	pod.Spec.Subdomain = ""
	if h, err := containerHostname(pod, "cluster.local"); err != nil || h != "web-0" {
		t.Fatalf("setHostnameAsFQDN without a subdomain: %q, %v", h, err)
	}
}
