package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/pkg/apparmor"
	corev1 "k8s.io/api/core/v1"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// securityParams are the host's side of how containers are confined.
type securityParams struct {
	// SeccompDefault is the seccomp profile of containers whose pod and container set none:
	// RuntimeDefault or Unconfined (--seccomp-default, the kubelet's seccompDefault).
	SeccompDefault corev1.SeccompProfileType
	// SeccompDir holds the Localhost seccomp profiles: <data-dir>/seccomp.
	SeccompDir string
	// AppArmor tells that the kernel enforces AppArmor. AppArmorDefault that containers
	// without a profile get containerd's default one, as containerd does where the kernel has
	// AppArmor and apparmor_parser is installed to load it.
	AppArmor, AppArmorDefault bool
}

// appArmorEnabled and appArmorDefault are read once: AppArmor does not come and go.
var (
	appArmorEnabled = sync.OnceValue(rt.AppArmorEnabled)
	appArmorDefault = sync.OnceValue(apparmor.HostSupports)
)

// securityParams returns the host's security settings for containers.
func (m *PodManager) securityParams() securityParams {
	def := corev1.SeccompProfileType(m.cfg.SeccompDefault)
	if def == "" {
		def = corev1.SeccompProfileTypeRuntimeDefault
	}
	return securityParams{SeccompDefault: def, SeccompDir: filepath.Join(m.cfg.DataDir, "seccomp"),
		AppArmor: appArmorEnabled(), AppArmorDefault: appArmorEnabled() && appArmorDefault()}
}

// effectiveSecurityContext merges the pod's security context under the container's, as the
// kubelet's DetermineEffectiveSecurityContext does: the container's fields win, and of the
// pod's only the user, group, runAsNonRoot, SELinux and Windows options apply to containers.
// Seccomp and AppArmor profiles are merged by seccompProfile and appArmorProfile.
func effectiveSecurityContext(pod *corev1.Pod, c *corev1.Container) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{}
	if psc := pod.Spec.SecurityContext; psc != nil {
		sc.SELinuxOptions = psc.SELinuxOptions
		sc.WindowsOptions = psc.WindowsOptions
		sc.RunAsUser = psc.RunAsUser
		sc.RunAsGroup = psc.RunAsGroup
		sc.RunAsNonRoot = psc.RunAsNonRoot
	}
	csc := c.SecurityContext
	if csc == nil {
		return sc
	}
	if csc.SELinuxOptions != nil {
		sc.SELinuxOptions = csc.SELinuxOptions
	}
	if csc.WindowsOptions != nil {
		sc.WindowsOptions = csc.WindowsOptions
	}
	if csc.RunAsUser != nil {
		sc.RunAsUser = csc.RunAsUser
	}
	if csc.RunAsGroup != nil {
		sc.RunAsGroup = csc.RunAsGroup
	}
	if csc.RunAsNonRoot != nil {
		sc.RunAsNonRoot = csc.RunAsNonRoot
	}
	sc.Capabilities = csc.Capabilities
	sc.Privileged = csc.Privileged
	sc.ReadOnlyRootFilesystem = csc.ReadOnlyRootFilesystem
	sc.AllowPrivilegeEscalation = csc.AllowPrivilegeEscalation
	sc.ProcMount = csc.ProcMount
	return sc
}

// podRef names a pod the way the kubelet does in its messages: NAME_NAMESPACE(UID).
func podRef(pod *corev1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// applySecurityContext sets the security fields of cfg from the pod's and the container's
// security contexts, the way the kubelet builds the container's CRI security context and
// containerd its OCI spec. The error is the kubelet's CreateContainerConfigError.
func applySecurityContext(cfg *rt.ContainerConfig, pod *corev1.Pod, c *corev1.Container, sp securityParams) error {
	sc := effectiveSecurityContext(pod, c)
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}

	switch {
	case sc.RunAsUser != nil:
		cfg.User = &rt.User{UID: *sc.RunAsUser, GID: sc.RunAsGroup}
	case sc.RunAsGroup != nil:
		cfg.Group = sc.RunAsGroup
	}
	if sc.RunAsNonRoot != nil && *sc.RunAsNonRoot {
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podRef(pod), c.Name)
		}
		cfg.RunAsNonRoot = true
	}
	// The groups in the kubelet's order: fsGroup, then supplementalGroups.
	if psc.FSGroup != nil {
		cfg.SupplementalGroups = append(cfg.SupplementalGroups, *psc.FSGroup)
	}
	cfg.SupplementalGroups = append(cfg.SupplementalGroups, psc.SupplementalGroups...)
	cfg.StrictSupplementalGroups = psc.SupplementalGroupsPolicy != nil && *psc.SupplementalGroupsPolicy == corev1.SupplementalGroupsPolicyStrict

	cfg.ReadOnlyRootfs = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
	cfg.Privileged = sc.Privileged != nil && *sc.Privileged
	if sc.Capabilities != nil {
		for _, a := range sc.Capabilities.Add {
			cfg.CapAdd = append(cfg.CapAdd, string(a))
		}
		for _, d := range sc.Capabilities.Drop {
			cfg.CapDrop = append(cfg.CapDrop, string(d))
		}
	}
	// The kubelet sets no_new_privs only for allowPrivilegeEscalation false.
	cfg.NoNewPrivileges = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	cfg.HostPID = pod.Spec.HostPID
	cfg.HostIPC = pod.Spec.HostIPC

	if len(psc.Sysctls) > 0 {
		if err := forbiddenSysctl(pod); err != nil {
			return err
		}
		cfg.Sysctls = map[string]string{}
		for _, s := range psc.Sysctls {
			cfg.Sysctls[normalizeSysctl(s.Name)] = s.Value
		}
	}

	seccomp, err := seccompProfile(pod, c, sp)
	if err != nil {
		return err
	}
	cfg.Seccomp = seccomp
	cfg.AppArmor = appArmorProfile(pod, c, sp.AppArmorDefault)
	return nil
}

// seccompProfile is the container's seccomp profile: the container's, else the pod's, else
// the host's default.
func seccompProfile(pod *corev1.Pod, c *corev1.Container, sp securityParams) (rt.Profile, error) {
	var p *corev1.SeccompProfile
	if c.SecurityContext != nil && c.SecurityContext.SeccompProfile != nil {
		p = c.SecurityContext.SeccompProfile
	} else if pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.SeccompProfile != nil {
		p = pod.Spec.SecurityContext.SeccompProfile
	}
	typ := sp.SeccompDefault
	if p != nil {
		typ = p.Type
	}
	switch typ {
	case corev1.SeccompProfileTypeRuntimeDefault:
		return rt.Profile{Type: rt.ProfileRuntimeDefault}, nil
	case corev1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return rt.Profile{}, errors.New("seccompProfile Localhost needs localhostProfile, a file below the node's seccomp directory")
		}
		if !filepath.IsLocal(*p.LocalhostProfile) {
			return rt.Profile{}, fmt.Errorf("seccompProfile localhostProfile %q must be a relative path below the node's seccomp directory", *p.LocalhostProfile)
		}
		return rt.Profile{Type: rt.ProfileLocalhost, Localhost: filepath.Join(sp.SeccompDir, *p.LocalhostProfile)}, nil
	}
	return rt.Profile{Type: rt.ProfileUnconfined}, nil
}

// The deprecated AppArmor annotation of a container and its values.
const (
	appArmorAnnotationPrefix = "container.apparmor.security.beta.kubernetes.io/"
	appArmorRuntimeDefault   = "runtime/default"
	appArmorLocalhostPrefix  = "localhost/"
	appArmorUnconfined       = "unconfined"
)

// requestedAppArmor is the AppArmor profile the pod asks for its container, as the kubelet
// finds it: the container's field, else the deprecated annotation, else the pod's field; nil
// when none.
func requestedAppArmor(pod *corev1.Pod, c *corev1.Container) *corev1.AppArmorProfile {
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		return c.SecurityContext.AppArmorProfile
	}
	if v, ok := pod.Annotations[appArmorAnnotationPrefix+c.Name]; ok {
		switch {
		case v == appArmorRuntimeDefault:
			return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
		case v == appArmorUnconfined:
			return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		case strings.HasPrefix(v, appArmorLocalhostPrefix):
			name := strings.TrimPrefix(v, appArmorLocalhostPrefix)
			return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
		}
	}
	if pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.AppArmorProfile != nil {
		return pod.Spec.SecurityContext.AppArmorProfile
	}
	return nil
}

// appArmorProfile is the container's AppArmor profile. Without one, containerd's default
// profile when byDefault (securityParams.AppArmorDefault), else none.
func appArmorProfile(pod *corev1.Pod, c *corev1.Container, byDefault bool) rt.Profile {
	p := requestedAppArmor(pod, c)
	if p == nil {
		if byDefault {
			return rt.Profile{Type: rt.ProfileRuntimeDefault}
		}
		return rt.Profile{Type: rt.ProfileUnconfined}
	}
	switch p.Type {
	case corev1.AppArmorProfileTypeRuntimeDefault:
		return rt.Profile{Type: rt.ProfileRuntimeDefault}
	case corev1.AppArmorProfileTypeLocalhost:
		name := ""
		if p.LocalhostProfile != nil {
			name = *p.LocalhostProfile
		}
		return rt.Profile{Type: rt.ProfileLocalhost, Localhost: name}
	}
	return rt.Profile{Type: rt.ProfileUnconfined}
}

// safeSysctls are the kubelet's safe sysctls, which every pod may set; the value is the
// namespace each belongs to, which a pod sharing the host's must not change.
var safeSysctls = map[string]string{
	"kernel.shm_rmid_forced":              "ipc",
	"net.ipv4.ip_local_port_range":        "net",
	"net.ipv4.tcp_syncookies":             "net",
	"net.ipv4.ping_group_range":           "net",
	"net.ipv4.ip_unprivileged_port_start": "net",
	"net.ipv4.ip_local_reserved_ports":    "net",
	"net.ipv4.tcp_keepalive_time":         "net",
	"net.ipv4.tcp_fin_timeout":            "net",
	"net.ipv4.tcp_keepalive_intvl":        "net",
	"net.ipv4.tcp_keepalive_probes":       "net",
	"net.ipv4.tcp_rmem":                   "net",
	"net.ipv4.tcp_wmem":                   "net",
}

// normalizeSysctl turns the slash form of a sysctl name (net/ipv4/tcp_syncookies) into the
// dotted one, as the kubelet does.
func normalizeSysctl(name string) string {
	i := strings.IndexAny(name, "./")
	if i < 0 || name[i] == '.' {
		return name
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, name)
}

// forbiddenSysctl is the kubelet's sysctl admission: only the safe sysctls, and none of the
// namespace the pod shares with the host. The error is the rejection message.
func forbiddenSysctl(pod *corev1.Pod) error {
	if pod.Spec.SecurityContext == nil {
		return nil
	}
	for _, s := range pod.Spec.SecurityContext.Sysctls {
		name := normalizeSysctl(s.Name)
		ns, ok := safeSysctls[name]
		switch {
		case !ok:
			return fmt.Errorf("forbidden sysctl: %q not allowlisted", name)
		case ns == "ipc" && pod.Spec.HostIPC, ns == "net" && pod.Spec.HostNetwork:
			return fmt.Errorf("forbidden sysctl: %q not allowed with host %s enabled", name, ns)
		}
	}
	return nil
}

// admitSecurity is the kubelet's admission of a pod's security settings on this host: unsafe
// sysctls, and AppArmor profiles on a kernel without AppArmor (checked for pending pods, as
// the kubelet does). It returns the reason and message of the rejection, empty when admitted.
func admitSecurity(pod *corev1.Pod, sp securityParams) (reason, message string) {
	if err := forbiddenSysctl(pod); err != nil {
		return "SysctlForbidden", err.Error()
	}
	if !sp.AppArmor && (pod.Status.Phase == "" || pod.Status.Phase == corev1.PodPending) {
		for _, c := range allContainers(pod) {
			if p := requestedAppArmor(pod, c); p != nil && p.Type != corev1.AppArmorProfileTypeUnconfined {
				return "AppArmor", "Cannot enforce AppArmor: AppArmor is not enabled on the host"
			}
		}
	}
	return "", ""
}

func allContainers(pod *corev1.Pod) []*corev1.Container {
	var out []*corev1.Container
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// reasonSecurityNotApplied is the reason of the Warning events about security settings this
// node does not carry out.
const reasonSecurityNotApplied = "SecurityContextNotApplied"

// securityWarnings lists what the pod asks of its security context that this node does not
// carry out, one message each, for Warning events.
func securityWarnings(pod *corev1.Pod) []string {
	var out []string
	if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
		out = append(out, "hostUsers: false is not supported on this node: the pod runs in the host's user namespace")
	}
	if pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace {
		out = append(out, "shareProcessNamespace is not supported on this node: each container has its own PID namespace")
	}
	psc := pod.Spec.SecurityContext
	if psc != nil && (psc.SELinuxOptions != nil || psc.SELinuxChangePolicy != nil) {
		out = append(out, "seLinuxOptions are not applied: this node does not label containers for SELinux")
	}
	for _, c := range allContainers(pod) {
		sc := c.SecurityContext
		if sc == nil {
			continue
		}
		if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
			out = append(out, fmt.Sprintf("procMount Unmasked of container %q is not honoured: /proc stays masked, "+
				"as an unmasked /proc needs a user namespace (hostUsers: false), which this node does not provide", c.Name))
		}
		if sc.SELinuxOptions != nil {
			out = append(out, fmt.Sprintf("seLinuxOptions of container %q are not applied: this node does not label containers for SELinux", c.Name))
		}
	}
	sort.Strings(out)
	return out
}

// createContainerError turns an error of the runtime's CreateContainer into the container's
// waiting reason and message, as the kubelet reports them: a runAsNonRoot refusal is a
// CreateContainerConfigError in the kubelet's words, anything else a CreateContainerError.
func createContainerError(pod *corev1.Pod, c *corev1.Container, err error) (reason, message string) {
	var nonRoot *rt.NonRootError
	if errors.As(err, &nonRoot) {
		return "CreateContainerConfigError", fmt.Sprintf("%s (pod: %q, container: %s)", nonRoot.Error(), podRef(pod), c.Name)
	}
	return "CreateContainerError", err.Error()
}

// admitSecurityContext runs admitSecurity once per worker, next to the declared-feature
// admission: a rejected pod is Failed with the kubelet's reason and "Pod was rejected"
// message and a Warning event; an admitted one gets a Warning event for each setting in
// securityWarnings. It reports whether the pod was rejected.
func (w *podWorker) admitSecurityContext(ctx context.Context, pod *corev1.Pod) (bool, error) {
	if reason, msg := admitSecurity(pod, w.m.securityParams()); reason != "" {
		w.event(pod, corev1.EventTypeWarning, reason, msg)
		w.failed = [2]string{reason, "Pod was rejected: " + msg}
		snap, err := w.m.containers(ctx, false)
		if err != nil {
			return true, err
		}
		// Failed is final: the next sync stops whatever still runs.
		return true, w.writeStatus(ctx, pod, attempts(snap[string(pod.UID)]), false)
	}
	for _, msg := range securityWarnings(pod) {
		w.event(pod, corev1.EventTypeWarning, reasonSecurityNotApplied, msg)
	}
	return false, nil
}
