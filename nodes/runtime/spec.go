package runtime

import (
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

// allCapabilities is every capability runc 1.1 knows on this kernel generation.
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

// computeCaps applies securityContext.capabilities to the default set the way the kubelet does:
// drop first (ALL drops everything), then add (ALL adds everything).
func computeCaps(defaults, add, drop []string) []string {
	set := map[string]bool{}
	for _, c := range defaults {
		set[c] = true
	}
	for _, c := range drop {
		c = normalizeCap(c)
		if c == "ALL" {
			set = map[string]bool{}
			continue
		}
		delete(set, c)
	}
	for _, c := range add {
		c = normalizeCap(c)
		if c == "ALL" {
			for _, a := range allCapabilities {
				set[a] = true
			}
			continue
		}
		set[c] = true
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

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
