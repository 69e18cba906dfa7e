package agent

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

var testSecurity = securityParams{SeccompDefault: corev1.SeccompProfileTypeRuntimeDefault, SeccompDir: "/data/seccomp"}

// securityConfig maps the first container of pod to its runtime configuration.
func securityConfig(t *testing.T, pod *corev1.Pod, sp securityParams) (rt.ContainerConfig, error) {
	t.Helper()
	return buildContainerConfig(pod, &pod.Spec.Containers[0], containerParams{PodDir: t.TempDir(), Security: sp})
}

func TestSecurityContextMapping(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pod   *corev1.PodSecurityContext
		ctr   *corev1.SecurityContext
		hosts func(*corev1.PodSpec)
		check func(t *testing.T, c rt.ContainerConfig)
	}{
		{name: "nothing set: image user, own namespaces, privilege escalation allowed, the host's default seccomp",
			check: func(t *testing.T, c rt.ContainerConfig) {
				if c.User != nil || c.Group != nil || c.RunAsNonRoot || c.NoNewPrivileges || c.HostPID || c.HostIPC || c.Privileged || c.ReadOnlyRootfs ||
					len(c.SupplementalGroups) > 0 || c.Sysctls != nil {
					t.Errorf("%+v", c)
				}
				if c.Seccomp != (rt.Profile{Type: rt.ProfileRuntimeDefault}) || c.AppArmor != (rt.Profile{Type: rt.ProfileUnconfined}) {
					t.Errorf("seccomp %+v apparmor %+v", c.Seccomp, c.AppArmor)
				}
			}},
		{name: "pod user and group, container user over it, fsGroup first among the groups",
			pod: &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000)), RunAsGroup: ptr.To(int64(3000)), FSGroup: ptr.To(int64(2000)),
				SupplementalGroups: []int64{4000, 5000}},
			ctr: &corev1.SecurityContext{RunAsUser: ptr.To(int64(1001))},
			check: func(t *testing.T, c rt.ContainerConfig) {
				if c.User == nil || c.User.UID != 1001 || c.User.GID == nil || *c.User.GID != 3000 {
					t.Errorf("user %+v", c.User)
				}
				if !reflect.DeepEqual(c.SupplementalGroups, []int64{2000, 4000, 5000}) || c.StrictSupplementalGroups {
					t.Errorf("groups %v strict %v", c.SupplementalGroups, c.StrictSupplementalGroups)
				}
			}},
		{name: "runAsGroup alone keeps the image's user; Strict policy",
			pod: &corev1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(corev1.SupplementalGroupsPolicyStrict)},
			ctr: &corev1.SecurityContext{RunAsGroup: ptr.To(int64(3000))},
			check: func(t *testing.T, c rt.ContainerConfig) {
				if c.User != nil || c.Group == nil || *c.Group != 3000 || !c.StrictSupplementalGroups {
					t.Errorf("user %+v group %v strict %v", c.User, c.Group, c.StrictSupplementalGroups)
				}
			}},
		{name: "runAsNonRoot from the pod is checked against the image by the runtime",
			pod: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
			check: func(t *testing.T, c rt.ContainerConfig) {
				if !c.RunAsNonRoot {
					t.Error("RunAsNonRoot not passed on")
				}
			}},
		{name: "container settings",
			ctr: &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
				Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}}},
			check: func(t *testing.T, c rt.ContainerConfig) {
				if !c.ReadOnlyRootfs || !c.NoNewPrivileges || !reflect.DeepEqual(c.CapAdd, []string{"NET_ADMIN"}) || !reflect.DeepEqual(c.CapDrop, []string{"ALL"}) {
					t.Errorf("%+v", c)
				}
			}},
		{name: "allowPrivilegeEscalation true leaves no_new_privs off",
			ctr: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(true), Privileged: ptr.To(true)},
			check: func(t *testing.T, c rt.ContainerConfig) {
				if c.NoNewPrivileges || !c.Privileged {
					t.Errorf("%+v", c)
				}
			}},
		{name: "host namespaces and safe sysctls in both spellings",
			pod: &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_local_port_range", Value: "1024 65000"},
				{Name: "kernel/shm_rmid_forced", Value: "1"}}},
			hosts: func(s *corev1.PodSpec) { s.HostPID = true },
			check: func(t *testing.T, c rt.ContainerConfig) {
				if !c.HostPID || c.HostIPC {
					t.Errorf("hostPID %v hostIPC %v", c.HostPID, c.HostIPC)
				}
				if !reflect.DeepEqual(c.Sysctls, map[string]string{"net.ipv4.ip_local_port_range": "1024 65000", "kernel.shm_rmid_forced": "1"}) {
					t.Errorf("sysctls %v", c.Sysctls)
				}
			}},
		{name: "container seccomp over the pod's; Localhost below the seccomp directory",
			pod: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}},
			ctr: &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/audit.json")}},
			check: func(t *testing.T, c rt.ContainerConfig) {
				if c.Seccomp != (rt.Profile{Type: rt.ProfileLocalhost, Localhost: "/data/seccomp/profiles/audit.json"}) {
					t.Errorf("seccomp %+v", c.Seccomp)
				}
			}},
		{name: "pod seccomp Unconfined over the host's default",
			pod: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}},
			check: func(t *testing.T, c rt.ContainerConfig) {
				if c.Seccomp.Type != rt.ProfileUnconfined {
					t.Errorf("seccomp %+v", c.Seccomp)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.SecurityContext = tc.pod
			pod.Spec.Containers[0].SecurityContext = tc.ctr
			if tc.hosts != nil {
				tc.hosts(&pod.Spec)
			}
			c, err := securityConfig(t, pod, testSecurity)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestSecurityContextMappingErrors(t *testing.T) {
	pod := testPod()
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To(int64(0))}
	_, err := securityConfig(t, pod, testSecurity)
	if err == nil || err.Error() != `container's runAsUser breaks non-root policy (pod: "web-0_shop(1234)", container: app)` {
		t.Errorf("runAsNonRoot with runAsUser 0: %v", err)
	}

	pod = testPod()
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{
		Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("../../etc/profile.json")}}
	if _, err := securityConfig(t, pod, testSecurity); err == nil || !strings.Contains(err.Error(), "below the node's seccomp directory") {
		t.Errorf("a Localhost profile outside the seccomp directory: %v", err)
	}
}

func TestSeccompDefault(t *testing.T) {
	pod := testPod()
	for def, want := range map[corev1.SeccompProfileType]rt.ProfileType{
		corev1.SeccompProfileTypeRuntimeDefault: rt.ProfileRuntimeDefault,
		corev1.SeccompProfileTypeUnconfined:     rt.ProfileUnconfined,
	} {
		sp := testSecurity
		sp.SeccompDefault = def
		c, err := securityConfig(t, pod, sp)
		if err != nil || c.Seccomp.Type != want {
			t.Errorf("--seccomp-default %s: %+v %v", def, c.Seccomp, err)
		}
	}
	m := &PodManager{cfg: PodConfig{DataDir: "/var/lib/flotilla"}}
	if sp := m.securityParams(); sp.SeccompDefault != corev1.SeccompProfileTypeRuntimeDefault || sp.SeccompDir != "/var/lib/flotilla/seccomp" {
		t.Errorf("unset --seccomp-default: %+v", sp)
	}
}

func TestAppArmorProfile(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	if got := appArmorProfile(pod, c, true); got.Type != rt.ProfileRuntimeDefault {
		t.Errorf("unset on an AppArmor host is containerd's default profile: %+v", got)
	}
	if got := appArmorProfile(pod, c, false); got.Type != rt.ProfileUnconfined {
		t.Errorf("unset without AppArmor: %+v", got)
	}
	pod.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/app": "localhost/k8s-deny-write"}
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}
	if got := appArmorProfile(pod, c, true); got != (rt.Profile{Type: rt.ProfileLocalhost, Localhost: "k8s-deny-write"}) {
		t.Errorf("the annotation goes before the pod's field: %+v", got)
	}
	c.SecurityContext = &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
	if got := appArmorProfile(pod, c, true); got.Type != rt.ProfileRuntimeDefault {
		t.Errorf("the container's field goes first: %+v", got)
	}
}

func TestAdmitSecurity(t *testing.T) {
	withSysctl := func(name string, mutate func(*corev1.PodSpec)) *corev1.Pod {
		p := testPod()
		p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: name, Value: "1"}}}
		if mutate != nil {
			mutate(&p.Spec)
		}
		return p
	}
	enabled := securityParams{AppArmor: true}
	for _, tc := range []struct {
		name            string
		pod             *corev1.Pod
		sp              securityParams
		reason, message string
	}{
		{"safe sysctl", withSysctl("net.ipv4.tcp_syncookies", nil), enabled, "", ""},
		{"unsafe sysctl", withSysctl("kernel.msgmax", nil), enabled, "SysctlForbidden", `forbidden sysctl: "kernel.msgmax" not allowlisted`},
		{"net sysctl with hostNetwork", withSysctl("net/ipv4/tcp_syncookies", func(s *corev1.PodSpec) { s.HostNetwork = true }), enabled,
			"SysctlForbidden", `forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled`},
		{"ipc sysctl with hostIPC", withSysctl("kernel.shm_rmid_forced", func(s *corev1.PodSpec) { s.HostIPC = true }), enabled,
			"SysctlForbidden", `forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled`},
		{"AppArmor asked on a host without it", func() *corev1.Pod {
			p := testPod()
			p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
			return p
		}(), securityParams{}, "AppArmor", "Cannot enforce AppArmor: AppArmor is not enabled on the host"},
		{"AppArmor by annotation on a host without it", func() *corev1.Pod {
			p := testPod()
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/app": "localhost/x"}
			return p
		}(), securityParams{}, "AppArmor", "Cannot enforce AppArmor: AppArmor is not enabled on the host"},
		{"AppArmor Unconfined on a host without it", func() *corev1.Pod {
			p := testPod()
			p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}
			return p
		}(), securityParams{}, "", ""},
		{"AppArmor of a running pod is not checked again", func() *corev1.Pod {
			p := testPod()
			p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
			p.Status.Phase = corev1.PodRunning
			return p
		}(), securityParams{}, "", ""},
	} {
		reason, msg := admitSecurity(tc.pod, tc.sp)
		if reason != tc.reason || msg != tc.message {
			t.Errorf("%s: %q %q, want %q %q", tc.name, reason, msg, tc.reason, tc.message)
		}
	}
}

func TestSecurityWarnings(t *testing.T) {
	pod := testPod()
	if w := securityWarnings(pod); len(w) != 0 {
		t.Errorf("nothing to warn about: %v", w)
	}
	pod.Spec.HostUsers = ptr.To(false)
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ProcMount: ptr.To(corev1.UnmaskedProcMount),
		SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c1"}}
	w := strings.Join(securityWarnings(pod), "\n")
	for _, want := range []string{"hostUsers: false is not supported", `procMount Unmasked of container "app" is not honoured`, `seLinuxOptions of container "app"`} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
}

func TestCreateContainerError(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	for _, tc := range []struct {
		err             error
		reason, message string
	}{
		{&rt.NonRootError{}, "CreateContainerConfigError",
			`container has runAsNonRoot and image will run as root (pod: "web-0_shop(1234)", container: app)`},
		{errors.Join(errors.New("create container x"), &rt.NonRootError{Username: "nginx"}), "CreateContainerConfigError",
			`container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root (pod: "web-0_shop(1234)", container: app)`},
		{errors.New(`cannot load seccomp profile "/data/seccomp/x.json": no such file or directory`), "CreateContainerError",
			`cannot load seccomp profile "/data/seccomp/x.json": no such file or directory`},
	} {
		if reason, msg := createContainerError(pod, c, tc.err); reason != tc.reason || msg != tc.message {
			t.Errorf("%v: %q %q", tc.err, reason, msg)
		}
	}
}

func TestApplyVolumeOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's group to any group needs root")
	}
	dir := t.TempDir()
	mustWrite := func(p string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(filepath.Join(dir, "sub", "key"), 0o600)
	outside := filepath.Join(t.TempDir(), "outside")
	mustWrite(outside, 0o600)
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	stat := func(p string) (uint32, os.FileMode) {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Gid, os.FileMode(st.Mode & 0o7777)
	}

	pod := testPod()
	secret := corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}
	if err := applyVolumeOwnership(pod, &secret, dir, volumeSources{}); err != nil {
		t.Fatal(err)
	}
	if gid, _ := stat(filepath.Join(dir, "sub", "key")); gid != 0 {
		t.Fatalf("a pod without fsGroup changed the volume: gid %d", gid)
	}

	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To(int64(2345))}
	if err := applyVolumeOwnership(pod, &secret, dir, volumeSources{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{
		dir:                              0o755 | 0o2000 | 0o550,
		filepath.Join(dir, "sub"):        0o755 | 0o2000 | 0o550,
		filepath.Join(dir, "sub", "key"): 0o640,
	} {
		if gid, mode := stat(p); gid != 2345 || mode != want {
			t.Errorf("%s: gid %d mode %o, want 2345 %o", p, gid, mode, want)
		}
	}
	if gid, _ := stat(filepath.Join(dir, "link")); gid != 2345 {
		t.Errorf("the link itself gets the group: %d", gid)
	}
	if gid, mode := stat(outside); gid != 0 || mode != 0o600 {
		t.Errorf("a link was followed out of the volume: %s gid %d mode %o", outside, gid, mode)
	}

	// An emptyDir is writable by the group; once its root is the group's, what containers
	// create later is left alone.
	empty := t.TempDir()
	ed := corev1.Volume{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	if err := applyVolumeOwnership(pod, &ed, empty, volumeSources{}); err != nil {
		t.Fatal(err)
	}
	if gid, mode := stat(empty); gid != 2345 || mode&0o2070 != 0o2070 {
		t.Errorf("emptyDir root: gid %d mode %o", gid, mode)
	}
	mustWrite(filepath.Join(empty, "later"), 0o600)
	if err := applyVolumeOwnership(pod, &ed, empty, volumeSources{}); err != nil {
		t.Fatal(err)
	}
	if _, mode := stat(filepath.Join(empty, "later")); mode != 0o600 {
		t.Errorf("a file created after set-up was changed: %o", mode)
	}

	host := corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: outside}}}
	if err := applyVolumeOwnership(pod, &host, filepath.Dir(outside), volumeSources{}); err != nil {
		t.Fatal(err)
	}
	if gid, _ := stat(outside); gid != 0 {
		t.Error("hostPath volumes keep their owner")
	}
}
