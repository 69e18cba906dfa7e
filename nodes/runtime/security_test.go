package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// specFor builds the OCI spec CreateContainer would give c's security settings, on a root
// file system holding an /etc/passwd and /etc/group: alice is 1000 (group 100) and a member
// of group staff (50).
func specFor(t *testing.T, c ContainerConfig, imageUser string) (*oci.Spec, error) {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:100::/home/alice:/bin/sh\n",
		"group":  "root:x:0:\nstaff:x:50:alice\nusers:x:100:\n",
	} {
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts, err := securityOpts(c, imageUser)
	if err != nil {
		return nil, err
	}
	setRoot := func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Root.Path = root
		return nil
	}
	ctx := namespaces.WithNamespace(context.Background(), "test")
	return oci.GenerateSpec(ctx, nil, &containers.Container{ID: "c"}, append([]oci.SpecOpts{setRoot}, opts...)...)
}

func mustSpec(t *testing.T, c ContainerConfig, imageUser string) *oci.Spec {
	t.Helper()
	s, err := specFor(t, c, imageUser)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hasNamespace(s *oci.Spec, typ specs.LinuxNamespaceType) bool {
	for _, n := range s.Linux.Namespaces {
		if n.Type == typ {
			return true
		}
	}
	return false
}

func TestSecurityOptsUserAndGroups(t *testing.T) {
	gid := int64(3000)
	group := int64(4000)
	for _, tc := range []struct {
		name      string
		c         ContainerConfig
		imageUser string
		uid, gid  uint32
		groups    []uint32
	}{
		{"runAsUser found in /etc/passwd takes its group and memberships",
			ContainerConfig{User: &User{UID: 1000}}, "", 1000, 100, []uint32{50, 100}},
		{"runAsUser not in /etc/passwd runs with group 0",
			ContainerConfig{User: &User{UID: 2000}}, "", 2000, 0, []uint32{0}},
		{"runAsUser and runAsGroup with supplemental groups",
			ContainerConfig{User: &User{UID: 1000, GID: &gid}, SupplementalGroups: []int64{5000, 2000}}, "", 1000, 3000, []uint32{50, 2000, 3000, 5000}},
		{"strict supplemental groups leave the image's memberships out",
			ContainerConfig{User: &User{UID: 1000, GID: &gid}, SupplementalGroups: []int64{5000}, StrictSupplementalGroups: true}, "", 1000, 3000, []uint32{3000, 5000}},
		{"runAsGroup alone keeps the image's user",
			ContainerConfig{Group: &group}, "1000:100", 1000, 4000, []uint32{50, 4000}},
		{"runAsGroup alone on an image without a user runs as root",
			ContainerConfig{Group: &group}, "", 0, 4000, []uint32{4000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := mustSpec(t, tc.c, tc.imageUser).Process.User
			if u.UID != tc.uid || u.GID != tc.gid || !reflect.DeepEqual(u.AdditionalGids, tc.groups) {
				t.Errorf("user %d:%d groups %v, want %d:%d groups %v", u.UID, u.GID, u.AdditionalGids, tc.uid, tc.gid, tc.groups)
			}
		})
	}
}

func TestSecurityOptsPrivilegesAndNamespaces(t *testing.T) {
	s := mustSpec(t, ContainerConfig{}, "")
	if s.Process.NoNewPrivileges {
		t.Error("no_new_privs set without allowPrivilegeEscalation false")
	}
	if !hasNamespace(s, specs.PIDNamespace) || !hasNamespace(s, specs.IPCNamespace) {
		t.Errorf("a container has its own PID and IPC namespaces: %+v", s.Linux.Namespaces)
	}
	if len(s.Linux.MaskedPaths) == 0 || !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		t.Errorf("procMount Default masks /proc: masked %v readonly %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	if s.Linux.Seccomp != nil {
		t.Error("zero Seccomp is unconfined")
	}

	s = mustSpec(t, ContainerConfig{NoNewPrivileges: true, HostPID: true, HostIPC: true, ReadOnlyRootfs: true,
		Sysctls: map[string]string{"net.ipv4.ip_local_port_range": "1024 65000", "kernel.shm_rmid_forced": "1"}}, "")
	if !s.Process.NoNewPrivileges || !s.Root.Readonly {
		t.Errorf("no_new_privs %v, read-only root %v", s.Process.NoNewPrivileges, s.Root.Readonly)
	}
	if hasNamespace(s, specs.PIDNamespace) || hasNamespace(s, specs.IPCNamespace) || !hasNamespace(s, specs.NetworkNamespace) {
		t.Errorf("hostPID and hostIPC share only those namespaces of the host: %+v", s.Linux.Namespaces)
	}
	if s.Linux.Sysctl["net.ipv4.ip_local_port_range"] != "1024 65000" || s.Linux.Sysctl["kernel.shm_rmid_forced"] != "1" {
		t.Errorf("sysctls %v", s.Linux.Sysctl)
	}
}

func TestSecurityOptsCapabilities(t *testing.T) {
	s := mustSpec(t, ContainerConfig{CapDrop: []string{"ALL"}, CapAdd: []string{"NET_ADMIN"}}, "")
	want := []string{"CAP_NET_ADMIN"}
	c := s.Process.Capabilities
	if !reflect.DeepEqual(c.Bounding, want) || !reflect.DeepEqual(c.Effective, want) || !reflect.DeepEqual(c.Permitted, want) {
		t.Errorf("drop ALL add NET_ADMIN: %+v", c)
	}
	s = mustSpec(t, ContainerConfig{CapDrop: []string{"CAP_NET_RAW", "chown"}}, "")
	if slices.Contains(s.Process.Capabilities.Bounding, "CAP_NET_RAW") || slices.Contains(s.Process.Capabilities.Bounding, "CAP_CHOWN") ||
		!slices.Contains(s.Process.Capabilities.Bounding, "CAP_KILL") {
		t.Errorf("drop NET_RAW and CHOWN from the defaults: %v", s.Process.Capabilities.Bounding)
	}
	s = mustSpec(t, ContainerConfig{Privileged: true, CapDrop: []string{"ALL"}, Seccomp: Profile{Type: ProfileRuntimeDefault}}, "")
	if len(s.Process.Capabilities.Bounding) < len(hostCapabilities()) || len(s.Linux.MaskedPaths) != 0 || s.Linux.Seccomp != nil {
		t.Errorf("privileged: every capability, nothing masked, no seccomp: caps %v masked %v seccomp %v",
			s.Process.Capabilities.Bounding, s.Linux.MaskedPaths, s.Linux.Seccomp != nil)
	}
}

func TestSecurityOptsSeccomp(t *testing.T) {
	s := mustSpec(t, ContainerConfig{Seccomp: Profile{Type: ProfileRuntimeDefault}}, "")
	if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActErrno || len(s.Linux.Seccomp.Syscalls) == 0 {
		t.Fatalf("RuntimeDefault is containerd's default profile: %+v", s.Linux.Seccomp)
	}
	if s := mustSpec(t, ContainerConfig{Seccomp: Profile{Type: ProfileUnconfined}}, ""); s.Linux.Seccomp != nil {
		t.Error("Unconfined sets a profile")
	}

	profile := filepath.Join(t.TempDir(), "audit.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_LOG"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s = mustSpec(t, ContainerConfig{Seccomp: Profile{Type: ProfileLocalhost, Localhost: profile}}, "")
	if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActLog {
		t.Errorf("Localhost profile not loaded: %+v", s.Linux.Seccomp)
	}
	missing := filepath.Join(filepath.Dir(profile), "missing.json")
	if _, err := specFor(t, ContainerConfig{Seccomp: Profile{Type: ProfileLocalhost, Localhost: missing}}, ""); err == nil ||
		!strings.Contains(err.Error(), "cannot load seccomp profile") || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing Localhost profile must fail naming the file: %v", err)
	}
}

func TestSecurityOptsAppArmorWithoutKernelSupport(t *testing.T) {
	if AppArmorEnabled() {
		t.Skip("the kernel has AppArmor enabled")
	}
	for _, p := range []Profile{{Type: ProfileRuntimeDefault}, {Type: ProfileLocalhost, Localhost: "k8s-deny-write"}} {
		if _, err := securityOpts(ContainerConfig{AppArmor: p}, ""); err == nil || err.Error() != "Cannot enforce AppArmor: AppArmor is not enabled on the host" {
			t.Errorf("%s profile on a host without AppArmor: %v", p.Type, err)
		}
	}
	if _, err := securityOpts(ContainerConfig{AppArmor: Profile{Type: ProfileUnconfined}}, ""); err != nil {
		t.Errorf("Unconfined needs no AppArmor: %v", err)
	}
}

func TestCheckNonRoot(t *testing.T) {
	root, user := &User{UID: 0}, &User{UID: 1000}
	for _, tc := range []struct {
		name      string
		c         ContainerConfig
		imageUser string
		want      *NonRootError
	}{
		{"not asked", ContainerConfig{}, "", nil},
		{"image without a user", ContainerConfig{RunAsNonRoot: true}, "", &NonRootError{}},
		{"image user 0", ContainerConfig{RunAsNonRoot: true}, "0:0", &NonRootError{}},
		{"image user named", ContainerConfig{RunAsNonRoot: true}, "nobody", &NonRootError{Username: "nobody"}},
		{"image user root by name", ContainerConfig{RunAsNonRoot: true}, "root", &NonRootError{Username: "root"}},
		{"image user numeric", ContainerConfig{RunAsNonRoot: true}, "1000:1000", nil},
		{"explicit root", ContainerConfig{RunAsNonRoot: true, User: root}, "1000", &NonRootError{Explicit: true}},
		{"explicit user over a root image", ContainerConfig{RunAsNonRoot: true, User: user}, "", nil},
	} {
		err := checkNonRoot(tc.c, tc.imageUser)
		var got *NonRootError
		errors.As(err, &got)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if msg := (&NonRootError{Username: "app"}).Error(); msg != "container has runAsNonRoot and image has non-numeric user (app), cannot verify user is non-root" {
		t.Errorf("message %q", msg)
	}
}
