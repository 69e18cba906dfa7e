package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// scNamespace holds the pods of TestSecurityContext. Privileged and hostPID pods need the
// privileged Pod Security level.
const scNamespace = "security-context"

// scPod is a pod of the toolbox in scNamespace on host-1 that runs once.
func scPod(name string, psc *corev1.PodSecurityContext, containers ...corev1.Container) *corev1.Pod {
	p := newPod(name, "host-1", corev1.RestartPolicyNever, containers...)
	p.Namespace = scNamespace
	p.Spec.SecurityContext = psc
	p.Spec.AutomountServiceAccountToken = ptr.To(false)
	return p
}

// scTool is a toolbox container with a security context.
func scTool(sc *corev1.SecurityContext, args ...string) corev1.Container {
	c := tool("main", args...)
	c.SecurityContext = sc
	return c
}

func containerLogs(c kubernetes.Interface, ns, pod, container string) string {
	b, err := c.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	if err != nil {
		return "logs: " + err.Error()
	}
	return string(b)
}

// statusLine returns the value of a field of /proc/self/status as printed by the pod.
func statusLine(status, field string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "(no " + field + ")"
}

// TestSecurityContext is the node agent's acceptance of pod and container security contexts on
// one host, after the Kubernetes node e2e "Security Context" cases: users and groups, fsGroup
// ownership of volumes, runAsNonRoot refusals with the kubelet's messages, a read-only root
// file system, no_new_privs, seccomp (the --seccomp-default RuntimeDefault, Unconfined,
// Localhost, privileged), capabilities, hostPID and hostIPC, sysctls and AppArmor.
func TestSecurityContext(t *testing.T) {
	s := newSite(t, 1)
	sideLoad(t, s)
	h := s.Hosts[0]

	// A Localhost seccomp profile that allows everything but getgroups, which fails with EPERM.
	profiles := filepath.Join(h.DataDir, "seccomp", "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(profiles, "deny-getgroups.json"), []byte(`{"defaultAction":"SCMP_ACT_ALLOW",`+
		`"syscalls":[{"names":["getgroups"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A System V shared memory segment of the machine, which only hostIPC pods see (the
	// site's hosts are network namespaces of this machine: they share its IPC namespace).
	shmID, err := unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|0o600)
	if err != nil {
		t.Fatalf("create a shared memory segment: %v", err)
	}
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(shmID, unix.IPC_RMID, nil) })
	// The host's init and this test process, as hostPID pods see them.
	hostInit, err := os.ReadFile("/proc/1/comm")
	if err != nil {
		t.Fatal(err)
	}
	testComm := fmt.Sprintf("/proc/%d/comm", os.Getpid())
	selfComm, err := os.ReadFile(testComm)
	if err != nil {
		t.Fatal(err)
	}

	startSite(t, s)
	c := clientOf(t, h)
	waitFor(t, 2*time.Minute, "1 Ready node", func() (bool, string) {
		n, state := readyNodes(h)
		return n == 1, state
	})
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/warn": "privileged"}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	root := &corev1.PodSecurityContext{}
	capsOf := func(add, drop []corev1.Capability) *corev1.SecurityContext {
		return &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: add, Drop: drop}}
	}
	status := []string{"cat", "/proc/self/status"}
	// Pods that run to completion; check sees the logs of container main.
	type finished struct {
		name      string
		pod       *corev1.Pod
		succeeded bool
		check     func(t *testing.T, logs string)
	}
	wantLogs := func(want string) func(t *testing.T, logs string) {
		return func(t *testing.T, logs string) {
			if logs != want {
				t.Errorf("logs %q, want %q", logs, want)
			}
		}
	}
	wantStatus := func(fields map[string]string) func(t *testing.T, logs string) {
		return func(t *testing.T, logs string) {
			for f, want := range fields {
				if got := statusLine(logs, f); got != want {
					t.Errorf("/proc/self/status %s: %q, want %q", f, got, want)
				}
			}
		}
	}
	fsGroupPod := scPod("fsgroup", &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000)), FSGroup: ptr.To(int64(2000))},
		scTool(nil, "stat", "/data", "/data/written", "/cfg"))
	fsGroupPod.Spec.InitContainers = []corev1.Container{tool("writer", "write", "/data/written", "by", "1000")}
	fsGroupPod.Spec.InitContainers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	fsGroupPod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "cfg", MountPath: "/cfg"}}
	fsGroupPod.Spec.Volumes = []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}},
	}
	if _, err := c.CoreV1().ConfigMaps(scNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data: map[string]string{"greeting": "hi"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	done := []finished{
		{"ids from runAsUser, runAsGroup, fsGroup and supplementalGroups", scPod("ids",
			&corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000)), RunAsGroup: ptr.To(int64(3000)), FSGroup: ptr.To(int64(2000)),
				SupplementalGroups: []int64{4000}}, scTool(nil, "id")),
			true, wantLogs("uid=1000 gid=3000 groups=2000,3000,4000\n")},
		{"container runAsUser over the pod's; no /etc/passwd gives group 0", scPod("override",
			&corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000))}, scTool(&corev1.SecurityContext{RunAsUser: ptr.To(int64(1001))}, "id")),
			true, wantLogs("uid=1001 gid=0 groups=0\n")},
		{"runAsNonRoot with a non-root runAsUser runs", scPod("nonroot-ok",
			&corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65534))}, scTool(nil, "id")),
			true, wantLogs("uid=65534 gid=0 groups=0\n")},
		{"fsGroup owns an emptyDir and a configMap volume, setgid", fsGroupPod, true, func(t *testing.T, logs string) {
			for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
				f := strings.Fields(l)
				if len(f) != 4 {
					t.Fatalf("stat output %q", logs)
				}
				mode, _ := strconv.ParseUint(f[1], 8, 32)
				switch f[0] {
				case "/data", "/cfg":
					// Group search and the setgid bit (and group write on the writable one).
					want := uint64(0o2050)
					if f[0] == "/data" {
						want = 0o2070
					}
					if f[3] != "2000" || mode&want != want {
						t.Errorf("%s: mode %s gid %s, want the bits %o and gid 2000", f[0], f[1], f[3], want)
					}
				case "/data/written":
					// Made by uid 1000 below a setgid directory: the fsGroup's.
					if f[2] != "1000" || f[3] != "2000" {
						t.Errorf("%s: uid %s gid %s, want 1000 2000", f[0], f[2], f[3])
					}
				}
			}
		}},
		{"root file system writable by default", scPod("rootfs-rw", root, scTool(nil, "write", "/probe", "x")),
			true, wantLogs("wrote /probe\n")},
		{"readOnlyRootFilesystem refuses a write", scPod("rootfs-ro", root,
			scTool(&corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}, "write", "/probe", "x")),
			false, func(t *testing.T, logs string) {
				if !strings.Contains(logs, "read-only file system") {
					t.Errorf("logs %q, want a read-only file system error", logs)
				}
			}},
		{"defaults: privilege escalation allowed, --seccomp-default RuntimeDefault", scPod("defaults", nil, scTool(nil, status...)),
			true, wantStatus(map[string]string{"NoNewPrivs": "0", "Seccomp": "2", "CapEff": "00000000a80425fb"})},
		{"allowPrivilegeEscalation false and RuntimeDefault", scPod("no-new-privs", nil,
			scTool(&corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}, status...)),
			true, wantStatus(map[string]string{"NoNewPrivs": "1", "Seccomp": "2"})},
		{"seccomp Unconfined", scPod("unconfined", &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}},
			scTool(nil, status...)), true, wantStatus(map[string]string{"Seccomp": "0", "NoNewPrivs": "0"})},
		{"seccomp Localhost profile denies getgroups", scPod("localhost", &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{
			Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/deny-getgroups.json")}}, scTool(nil, "id")),
			false, wantLogs("getgroups: operation not permitted\n")},
		{"privileged runs unconfined with every capability", scPod("privileged", nil, scTool(&corev1.SecurityContext{Privileged: ptr.To(true)}, status...)),
			true, func(t *testing.T, logs string) {
				if statusLine(logs, "Seccomp") != "0" || statusLine(logs, "CapEff") == "00000000a80425fb" {
					t.Errorf("Seccomp %s CapEff %s", statusLine(logs, "Seccomp"), statusLine(logs, "CapEff"))
				}
			}},
		{"capabilities: add NET_ADMIN", scPod("cap-add", nil, scTool(capsOf([]corev1.Capability{"NET_ADMIN"}, nil), status...)),
			true, wantStatus(map[string]string{"CapEff": "00000000a80435fb"})},
		{"capabilities: drop ALL", scPod("cap-drop-all", nil, scTool(capsOf(nil, []corev1.Capability{"ALL"}), status...)),
			true, wantStatus(map[string]string{"CapEff": "0000000000000000", "CapBnd": "0000000000000000"})},
		{"capabilities: drop ALL, add NET_ADMIN", scPod("cap-only-net-admin", nil, scTool(capsOf([]corev1.Capability{"NET_ADMIN"}, []corev1.Capability{"ALL"}), status...)),
			true, wantStatus(map[string]string{"CapEff": "0000000000001000"})},
		{"hostPID sees the host's processes", func() *corev1.Pod {
			p := scPod("host-pid", nil, scTool(nil, "cat", "/proc/1/comm", testComm))
			p.Spec.HostPID = true
			return p
		}(), true, wantLogs(string(hostInit) + string(selfComm))},
		{"without hostPID PID 1 is the container's own process", scPod("own-pid", nil, scTool(nil, "cat", "/proc/1/comm")),
			true, wantLogs("app\n")},
		{"without hostPID the host's processes are not seen", scPod("own-pid-only", nil, scTool(nil, "cat", testComm)),
			false, wantLogs(fmt.Sprintf("open %s: no such file or directory\n", testComm))},
		{"hostIPC sees the host's shared memory", func() *corev1.Pod {
			p := scPod("host-ipc", nil, scTool(nil, "cat", "/proc/sysvipc/shm"))
			p.Spec.HostIPC = true
			return p
		}(), true, func(t *testing.T, logs string) {
			if !hasShm(logs, shmID) {
				t.Errorf("shared memory segment %d not listed:\n%s", shmID, logs)
			}
		}},
		{"without hostIPC the host's shared memory is not seen", scPod("own-ipc", nil, scTool(nil, "cat", "/proc/sysvipc/shm")),
			true, func(t *testing.T, logs string) {
				if hasShm(logs, shmID) {
					t.Errorf("shared memory segment %d of the host listed:\n%s", shmID, logs)
				}
			}},
		{"safe sysctls are set", scPod("sysctls", &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{
			{Name: "kernel.shm_rmid_forced", Value: "1"}, {Name: "net.ipv4.ip_local_port_range", Value: "40000 50000"}}},
			scTool(nil, "cat", "/proc/sys/kernel/shm_rmid_forced", "/proc/sys/net/ipv4/ip_local_port_range")),
			true, wantLogs("1\n40000\t50000\n")},
		{"procMount Unmasked is not honoured", scPod("unmasked", nil,
			scTool(&corev1.SecurityContext{ProcMount: ptr.To(corev1.UnmaskedProcMount)}, "stat", "/proc/interrupts")),
			true, func(t *testing.T, logs string) {
				// A masked /proc/interrupts is /dev/null bound over it (mode 0666), not the
				// kernel's 0444 file.
				if f := strings.Fields(logs); len(f) != 4 || f[1] != "0666" {
					t.Errorf("/proc/interrupts is not masked: %q", logs)
				}
			}},
	}
	for _, tc := range done {
		if err := createRetrying(c, tc.pod); err != nil {
			t.Fatalf("create pod %s: %v", tc.pod.Name, err)
		}
	}

	// Pods that must not start their container.
	refusedRoot := scPod("nonroot-image", &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}, scTool(nil, "id"))
	refusedExplicit := scPod("nonroot-explicit", &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
		scTool(&corev1.SecurityContext{RunAsUser: ptr.To(int64(0))}, "id"))
	missingProfile := scPod("missing-profile", &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{
		Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/absent.json")}}, scTool(nil, "id"))
	unsafeSysctl := scPod("unsafe-sysctl", &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.msgmax", Value: "10000"}}}, scTool(nil, "id"))
	apparmor := scPod("apparmor", &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}},
		scTool(nil, "cat", "/proc/self/attr/current"))
	for _, p := range []*corev1.Pod{refusedRoot, refusedExplicit, missingProfile, unsafeSysctl, apparmor} {
		if err := createRetrying(c, p); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}

	for _, tc := range done {
		t.Run(tc.name, func(t *testing.T) {
			want := corev1.PodSucceeded
			if !tc.succeeded {
				want = corev1.PodFailed
			}
			p := waitScPod(t, c, tc.pod.Name, 2*time.Minute, "finished", func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
			})
			logs := containerLogs(c, scNamespace, p.Name, "main")
			if p.Status.Phase != want {
				t.Errorf("phase %s, want %s: %s; logs %q", p.Status.Phase, want, describe(p), logs)
			}
			tc.check(t, logs)
		})
	}

	waiting := func(t *testing.T, name, reason, message string) {
		t.Helper()
		p := waitScPod(t, c, name, time.Minute, "waiting with "+reason, func(p *corev1.Pod) bool {
			cs := statusOf(p, "main")
			return cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == reason
		})
		got := statusOf(p, "main").State.Waiting.Message
		if !strings.Contains(got, message) || p.Status.Phase != corev1.PodPending {
			t.Errorf("phase %s, message %q, want it to contain %q", p.Status.Phase, got, message)
		}
		if !hasEvent(t, c, name, corev1.EventTypeWarning, "Failed", message) {
			t.Errorf("no Warning event Failed with %q", message)
		}
	}
	rejected := func(t *testing.T, name, reason, message string) {
		t.Helper()
		p := waitScPod(t, c, name, time.Minute, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if p.Status.Reason != reason || p.Status.Message != "Pod was rejected: "+message {
			t.Errorf("reason %q message %q, want %q %q", p.Status.Reason, p.Status.Message, reason, "Pod was rejected: "+message)
		}
		if !hasEvent(t, c, name, corev1.EventTypeWarning, reason, message) {
			t.Errorf("no Warning event %s %q", reason, message)
		}
	}
	ref := func(p *corev1.Pod) string {
		got, err := c.CoreV1().Pods(scNamespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s_%s(%s)", got.Name, got.Namespace, got.UID)
	}

	t.Run("runAsNonRoot refuses the root image", func(t *testing.T) {
		waiting(t, refusedRoot.Name, "CreateContainerConfigError",
			fmt.Sprintf("container has runAsNonRoot and image will run as root (pod: %q, container: main)", ref(refusedRoot)))
	})
	t.Run("runAsNonRoot refuses runAsUser 0", func(t *testing.T) {
		waiting(t, refusedExplicit.Name, "CreateContainerConfigError",
			fmt.Sprintf("container's runAsUser breaks non-root policy (pod: %q, container: main)", ref(refusedExplicit)))
	})
	t.Run("a missing Localhost seccomp profile", func(t *testing.T) {
		waiting(t, missingProfile.Name, "CreateContainerError",
			fmt.Sprintf("cannot load seccomp profile %q", filepath.Join(h.DataDir, "seccomp", "profiles", "absent.json")))
	})
	t.Run("an unsafe sysctl is forbidden", func(t *testing.T) {
		rejected(t, unsafeSysctl.Name, "SysctlForbidden", `forbidden sysctl: "kernel.msgmax" not allowlisted`)
	})
	t.Run("AppArmor", func(t *testing.T) {
		if b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled"); err == nil && strings.HasPrefix(string(b), "Y") {
			if p := waitScPod(t, c, apparmor.Name, 2*time.Minute, "finished", func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
			}); p.Status.Phase != corev1.PodSucceeded {
				t.Fatalf("AppArmor pod: %s", describe(p))
			}
			if logs := containerLogs(c, scNamespace, apparmor.Name, "main"); !strings.Contains(logs, "cri-containerd.apparmor.d") {
				t.Errorf("not confined by the default profile: %q", logs)
			}
			return
		}
		rejected(t, apparmor.Name, "AppArmor", "Cannot enforce AppArmor: AppArmor is not enabled on the host")
	})
	t.Run("procMount Unmasked is reported", func(t *testing.T) {
		if !hasEvent(t, c, "unmasked", corev1.EventTypeWarning, "SecurityContextNotApplied", `procMount Unmasked of container "main" is not honoured`) {
			t.Error("no Warning event about procMount Unmasked")
		}
	})
}

// createRetrying creates a pod, retrying for a while: a namespace's default ServiceAccount
// appears shortly after the namespace.
func createRetrying(c kubernetes.Interface, p *corev1.Pod) error {
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if _, err = c.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err == nil {
			return nil
		}
	}
	return err
}

func waitScPod(t *testing.T, c kubernetes.Interface, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	waitFor(t, timeout, "pod "+name+" "+what, func() (bool, string) {
		p, err := c.CoreV1().Pods(scNamespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		last = p
		return cond(p), describe(p) + " reason=" + p.Status.Reason + " message=" + p.Status.Message
	})
	return last
}

// hasEvent waits up to 20 s for an event of the pod whose message contains message.
func hasEvent(t *testing.T, c kubernetes.Interface, pod, typ, reason, message string) bool {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		evs, err := c.CoreV1().Events(scNamespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			continue
		}
		for _, e := range evs.Items {
			if e.Type == typ && e.Reason == reason && strings.Contains(e.Message, message) {
				return true
			}
		}
	}
	return false
}

// hasShm reports whether a /proc/sysvipc/shm listing has the segment id.
func hasShm(listing string, id int) bool {
	for _, l := range strings.Split(listing, "\n")[1:] {
		if f := strings.Fields(l); len(f) > 1 && f[1] == strconv.Itoa(id) {
			return true
		}
	}
	return false
}
