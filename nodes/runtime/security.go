package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/contrib/apparmor"
	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cap"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// ProfileType says how a seccomp or AppArmor profile confines a container.
type ProfileType string

// The profile types, as Kubernetes names them. The empty type is Unconfined.
const (
	ProfileUnconfined     ProfileType = "Unconfined"
	ProfileRuntimeDefault ProfileType = "RuntimeDefault"
	ProfileLocalhost      ProfileType = "Localhost"
)

// Profile is a seccomp or AppArmor profile.
type Profile struct {
	Type ProfileType
	// Localhost is, for seccomp, the path of a JSON profile on the host and, for AppArmor, the
	// name of a profile loaded in the kernel; only with Type Localhost.
	Localhost string
}

// AppArmorDefaultProfile is the name the runtime's default AppArmor profile is loaded under,
// the one containerd's CRI plugin uses.
const AppArmorDefaultProfile = "cri-containerd.apparmor.d"

// NonRootError is what CreateContainer returns for a container with RunAsNonRoot that would
// run as root, or whose image user is a name that cannot be checked. The container is not
// created.
type NonRootError struct {
	// Username is the image's non-numeric user; empty when the user is root.
	Username string
	// Explicit tells that User (UID 0) asked for root, rather than the image.
	Explicit bool
}

func (e *NonRootError) Error() string {
	switch {
	case e.Explicit:
		return "container's runAsUser breaks non-root policy"
	case e.Username != "":
		return fmt.Sprintf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root", e.Username)
	}
	return "container has runAsNonRoot and image will run as root"
}

// checkNonRoot applies RunAsNonRoot the way the kubelet does: an explicit user must not be
// 0; otherwise the image's user must be a number other than 0 (an absent one is root, a name
// cannot be checked).
func checkNonRoot(c ContainerConfig, imageUser string) error {
	if !c.RunAsNonRoot {
		return nil
	}
	if c.User != nil {
		if c.User.UID == 0 {
			return &NonRootError{Explicit: true}
		}
		return nil
	}
	u, _, _ := strings.Cut(imageUser, ":")
	if u == "" {
		return &NonRootError{}
	}
	uid, err := strconv.ParseInt(u, 10, 64)
	if err != nil {
		return &NonRootError{Username: u}
	}
	if uid == 0 {
		return &NonRootError{}
	}
	return nil
}

// securityOpts returns the spec options of c's user, groups, capabilities, privileges,
// namespaces, sysctls and profiles, in the order containerd's CRI plugin applies them. They
// go after the image's configuration; imageUser is the image's USER.
func securityOpts(c ContainerConfig, imageUser string) ([]oci.SpecOpts, error) {
	// no_new_privs only when asked (allowPrivilegeEscalation false), as the kubelet.
	opts := []oci.SpecOpts{oci.WithNewPrivileges}

	// The user: an explicit UID (and group), or the image's user with an explicit group. The
	// image's user alone was set with the image's configuration.
	imageName, _, _ := strings.Cut(imageUser, ":")
	groupsOf := imageName
	switch {
	case c.User != nil:
		u := strconv.FormatInt(c.User.UID, 10)
		groupsOf = u
		if c.User.GID != nil {
			u += ":" + strconv.FormatInt(*c.User.GID, 10)
		}
		opts = append(opts, oci.WithUser(u))
	case c.Group != nil:
		if imageName == "" {
			imageName = "0"
		}
		opts = append(opts, oci.WithUser(imageName+":"+strconv.FormatInt(*c.Group, 10)))
	}
	if groupsOf == "" {
		groupsOf = "0"
	}
	if c.User != nil || c.Group != nil || c.StrictSupplementalGroups || len(c.SupplementalGroups) > 0 {
		opts = append(opts, withGroups(groupsOf, c.SupplementalGroups, c.StrictSupplementalGroups))
	}

	if c.ReadOnlyRootfs {
		opts = append(opts, oci.WithRootFSReadonly())
	}
	if len(c.CapAdd) > 0 || len(c.CapDrop) > 0 {
		opts = append(opts, withCapChanges(c.CapAdd, c.CapDrop))
	}
	if c.Privileged {
		opts = append(opts, oci.WithPrivileged, oci.WithAllDevicesAllowed, oci.WithHostDevices)
	}
	if c.NoNewPrivileges {
		opts = append(opts, oci.WithNoNewPrivileges)
	}
	if c.HostPID {
		opts = append(opts, oci.WithHostNamespace(specs.PIDNamespace))
	}
	if c.HostIPC {
		opts = append(opts, oci.WithHostNamespace(specs.IPCNamespace))
	}
	if len(c.Sysctls) > 0 {
		opts = append(opts, withSysctls(c.Sysctls))
	}

	// Seccomp after the capabilities: the default profile allows syscalls by capability.
	// Privileged containers run unconfined.
	switch {
	case c.Privileged:
	case c.Seccomp.Type == ProfileRuntimeDefault:
		opts = append(opts, seccomp.WithDefaultProfile())
	case c.Seccomp.Type == ProfileLocalhost:
		if c.Seccomp.Localhost == "" {
			return nil, errors.New("seccomp profile Localhost without a profile file")
		}
		opts = append(opts, seccomp.WithProfile(c.Seccomp.Localhost))
	case c.Seccomp.Type == "" || c.Seccomp.Type == ProfileUnconfined:
		opts = append(opts, oci.WithSeccompUnconfined)
	default:
		return nil, fmt.Errorf("unknown seccomp profile type %q", c.Seccomp.Type)
	}

	switch c.AppArmor.Type {
	case "", ProfileUnconfined:
	case ProfileRuntimeDefault, ProfileLocalhost:
		if !AppArmorEnabled() {
			return nil, errors.New("Cannot enforce AppArmor: AppArmor is not enabled on the host")
		}
		if c.AppArmor.Type == ProfileRuntimeDefault {
			// As containerd: privileged containers get no default profile.
			if !c.Privileged {
				opts = append(opts, apparmor.WithDefaultProfile(AppArmorDefaultProfile))
			}
			break
		}
		ok, err := appArmorProfileLoaded(c.AppArmor.Localhost)
		if err != nil {
			return nil, fmt.Errorf("apparmor profile %q: %w", c.AppArmor.Localhost, err)
		}
		if !ok {
			return nil, fmt.Errorf("apparmor profile not found %s", c.AppArmor.Localhost)
		}
		opts = append(opts, apparmor.WithProfile(c.AppArmor.Localhost))
	default:
		return nil, fmt.Errorf("unknown apparmor profile type %q", c.AppArmor.Type)
	}
	return opts, nil
}

// withGroups sets the process's supplementary groups: its primary group, the groups the
// image's /etc/group lists user in (unless strict) and extra.
func withGroups(user string, extra []int64, strict bool) oci.SpecOpts {
	return func(ctx context.Context, client oci.Client, c *containers.Container, s *oci.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		var gids []uint32
		if strict {
			gids = []uint32{s.Process.User.GID}
		} else {
			prev := s.Process.User.AdditionalGids
			if err := oci.WithAdditionalGIDs(user)(ctx, client, c, s); err != nil {
				return err
			}
			gids = append(prev, s.Process.User.AdditionalGids...)
			gids = append(gids, s.Process.User.GID)
		}
		for _, g := range extra {
			gids = append(gids, uint32(g))
		}
		slices.Sort(gids)
		s.Process.User.AdditionalGids = slices.Compact(gids)
		return nil
	}
}

func withSysctls(sysctls map[string]string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		if s.Linux.Sysctl == nil {
			s.Linux.Sysctl = map[string]string{}
		}
		maps.Copy(s.Linux.Sysctl, sysctls)
		return nil
	}
}

// hostCapabilities are the capabilities this process holds, which "ALL" stands for (runc
// cannot give a container more).
var hostCapabilities = sync.OnceValue(func() []string {
	if caps, err := cap.Current(); err == nil && len(caps) > 0 {
		return caps
	}
	return allCapabilities
})

// AppArmorEnabled reports whether the kernel enforces AppArmor.
func AppArmorEnabled() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && strings.HasPrefix(string(b), "Y")
}

// appArmorProfileLoaded reports whether the kernel has a profile of that name.
func appArmorProfileLoaded(name string) (bool, error) {
	f, err := os.Open("/sys/kernel/security/apparmor/profiles")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), name+" (") {
			return true, nil
		}
	}
	return false, sc.Err()
}
