package runtime

import (
	"slices"
	"sort"
	"strings"
)

// resolveArgs applies Kubernetes' command/args rules to an image's Entrypoint and Cmd:
// command replaces the entrypoint and drops the image's cmd; args alone replace cmd.
func resolveArgs(entrypoint, cmd, command, args []string) []string {
	var out []string
	switch {
	case len(command) > 0:
		out = append(out, command...)
		out = append(out, args...)
	case len(args) > 0:
		out = append(out, entrypoint...)
		out = append(out, args...)
	default:
		out = append(out, entrypoint...)
		out = append(out, cmd...)
	}
	return out
}

// allCapabilities is every capability runc 1.1 knows on this kernel generation; "ALL" stands
// for them when the capabilities of this process cannot be read.
var allCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// normalizeCap turns "net_admin" or "NET_ADMIN" into "CAP_NET_ADMIN"; "ALL" stays "ALL".
func normalizeCap(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	if c == "ALL" || strings.HasPrefix(c, "CAP_") {
		return c
	}
	return "CAP_" + c
}

// computeCaps applies securityContext.capabilities to the default set the way containerd's CRI
// plugin does: "ALL" in add gives every capability the host has, "ALL" in drop removes every
// one, then the named ones are added and the named drops removed, so add ALL with drop CHOWN
// keeps all but CAP_CHOWN and drop ALL with add NET_ADMIN keeps CAP_NET_ADMIN alone. Names may
// have the CAP_ prefix or not, in any case.
func computeCaps(defaults, add, drop []string) []string {
	set := map[string]bool{}
	for _, c := range defaults {
		set[c] = true
	}
	if slices.ContainsFunc(add, isAll) {
		for _, a := range hostCapabilities() {
			set[a] = true
		}
	}
	if slices.ContainsFunc(drop, isAll) {
		set = map[string]bool{}
	}
	for _, c := range add {
		if !isAll(c) {
			set[normalizeCap(c)] = true
		}
	}
	for _, c := range drop {
		if !isAll(c) {
			delete(set, normalizeCap(c))
		}
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func isAll(c string) bool { return normalizeCap(c) == "ALL" }

// mountOptions returns the OCI mount type, source and options for a Mount.
func mountOptions(m Mount) (typ, source string, opts []string) {
	switch m.Type {
	case "tmpfs":
		opts = append([]string{"nosuid", "nodev"}, m.Options...)
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		return "tmpfs", "tmpfs", opts
	default:
		opts = append([]string{"rbind", "rprivate"}, m.Options...)
		if m.ReadOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		return "bind", m.Source, opts
	}
}
