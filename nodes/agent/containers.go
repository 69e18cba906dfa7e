package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// Labels on every container the agent creates: they tie a runtime container back to its pod,
// so a restarted agent can adopt what runs instead of starting it again.
const (
	labelPodUID       = "flotilla.dev/pod-uid"
	labelPodNamespace = "flotilla.dev/pod-namespace"
	labelPodName      = "flotilla.dev/pod-name"
	labelContainer    = "flotilla.dev/container"
	labelAttempt      = "flotilla.dev/attempt"
	labelInit         = "flotilla.dev/init"
)

// containerID names attempt n of a container of a pod within containerd's identifier rules
// (76 characters, alphanumerics and -._).
func containerID(podUID, name string, attempt int) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return fmt.Sprintf("%s-%08x-%d", podUID, h.Sum32(), attempt)
}

// containerParams is what, besides the pod, decides how a container is created.
type containerParams struct {
	Attempt   int
	Init      bool
	Env       []string
	NetNSPath string
	Volumes   map[string]string // volume name -> host path
	PodDir    string            // holds etc-hosts, resolv.conf, hostname and logs
	Domain    string
	// Security are the host's settings of seccomp and AppArmor.
	Security securityParams
}

// buildContainerConfig turns a pod's container into the runtime's container configuration.
func buildContainerConfig(pod *corev1.Pod, c *corev1.Container, p containerParams) (rt.ContainerConfig, error) {
	hostname, err := containerHostname(pod, p.Domain)
	if err != nil {
		return rt.ContainerConfig{}, err
	}
	cfg := rt.ContainerConfig{
		ID:    containerID(string(pod.UID), c.Name, p.Attempt),
		Image: c.Image,
		Labels: map[string]string{
			labelPodUID: string(pod.UID), labelPodNamespace: pod.Namespace, labelPodName: pod.Name,
			labelContainer: c.Name, labelAttempt: strconv.Itoa(p.Attempt),
		},
		Command:    c.Command,
		Args:       c.Args,
		Env:        p.Env,
		WorkingDir: c.WorkingDir,
		Hostname:   hostname,
		NetNSPath:  p.NetNSPath,
		LogPath:    logPath(p.PodDir, c.Name, p.Attempt),
	}
	if p.Init {
		cfg.Labels[labelInit] = "true"
	}
	// Container runtimes set HOSTNAME as the CRI does; an explicit env entry wins.
	if !pod.Spec.HostNetwork && !hasEnv(p.Env, "HOSTNAME") {
		cfg.Env = append([]string{"HOSTNAME=" + hostname}, p.Env...)
	}
	if pod.Spec.HostNetwork {
		cfg.NetNSPath = ""
		cfg.Hostname = ""
		cfg.HostNetwork = true
	}
	// $(VAR) in command and args expands against the container's environment.
	vars := map[string]string{}
	for _, kv := range p.Env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	cfg.Command = expandAll(c.Command, vars)
	cfg.Args = expandAll(c.Args, vars)

	for _, f := range []struct{ name, dest string }{{"etc-hosts", "/etc/hosts"}, {"resolv.conf", "/etc/resolv.conf"}, {"hostname", "/etc/hostname"}} {
		if pod.Spec.HostNetwork && f.dest != "/etc/resolv.conf" {
			continue
		}
		cfg.Mounts = append(cfg.Mounts, rt.Mount{Source: filepath.Join(p.PodDir, f.name), Destination: f.dest})
	}
	// The container may write why it ended there (terminationMessagePath, /dev/termination-log
	// by default); the agent reports it in the terminated state's message.
	if c.TerminationMessagePath != "" && p.PodDir != "" {
		cfg.Mounts = append(cfg.Mounts, rt.Mount{Source: terminationLogPath(p.PodDir, c.Name, p.Attempt), Destination: c.TerminationMessagePath})
	}
	for i, m := range c.VolumeMounts {
		src, ok := p.Volumes[m.Name]
		if !ok {
			return cfg, fmt.Errorf("container %q: volumeMount %q names no volume of the pod", c.Name, m.Name)
		}
		sub := m.SubPath
		if m.SubPathExpr != "" {
			sub = expandVars(m.SubPathExpr, vars)
		}
		if sub != "" {
			// The path is resolved inside the volume and bind-mounted onto a staging path
			// the container cannot reach; a missing one is created as a directory, as the
			// kubelet does.
			if p.PodDir == "" {
				return cfg, fmt.Errorf("container %q: subPath %q: no pod directory to stage the mount in", c.Name, sub)
			}
			staged, err := bindSubPath(src, sub, subPathStaging(p.PodDir, m.Name, c.Name, i))
			if err != nil {
				return cfg, fmt.Errorf("container %q: volumeMount %q: %w", c.Name, m.Name, err)
			}
			src = staged
		}
		readOnly := m.ReadOnly || writtenVolume(pod, m.Name)
		cfg.Mounts = append(cfg.Mounts, rt.Mount{Source: src, Destination: m.MountPath, ReadOnly: readOnly})
	}

	if err := applySecurityContext(&cfg, pod, c, p.Security); err != nil {
		return cfg, err
	}

	// Resources -> cgroup settings, as the kubelet maps them.
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		cfg.CPUShares = milliCPUToShares(q.MilliValue())
	} else if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		cfg.CPUShares = milliCPUToShares(q.MilliValue())
	} else {
		cfg.CPUShares = 2
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		cfg.CPUPeriod = 100000
		cfg.CPUQuota = q.MilliValue() * 100000 / 1000
		if cfg.CPUQuota < 1000 {
			cfg.CPUQuota = 1000
		}
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		cfg.MemoryLimit = q.Value()
	}
	return cfg, nil
}

func milliCPUToShares(m int64) uint64 {
	s := m * 1024 / 1000
	if s < 2 {
		s = 2
	}
	return uint64(s)
}

func expandAll(in []string, vars map[string]string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expandVars(s, vars)
	}
	return out
}

// logPath is where attempt n of a container logs (CRI format).
func logPath(podDir, container string, attempt int) string {
	return filepath.Join(podDir, "logs", container, strconv.Itoa(attempt)+".log")
}

// terminationLogPath is the host file bound to attempt of a container's terminationMessagePath.
func terminationLogPath(podDir, container string, attempt int) string {
	return filepath.Join(podDir, "termination", container, strconv.Itoa(attempt))
}

// Limits of a termination message, as the kubelet's: the last 4 KiB of the file, or with
// FallbackToLogsOnError the last 2 KiB of the last 80 lines of the log.
const (
	maxTerminationMessage    = 4096
	maxTerminationLogMessage = 2048
	terminationLogLines      = 80
)

// terminationMessage is what the exited attempt s of container c left as its termination
// message: the file bound to its terminationMessagePath, or, with FallbackToLogsOnError, when
// that is empty and the container failed, the end of its log.
func terminationMessage(ctx context.Context, podDir string, c *corev1.Container, s *rt.ContainerStatus) string {
	attempt := attemptOf(*s)
	if msg := readLast(terminationLogPath(podDir, c.Name, attempt), maxTerminationMessage); msg != "" ||
		c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError || s.ExitCode == 0 {
		return msg
	}
	var buf bytes.Buffer
	if err := rt.ReadLogs(ctx, logPath(podDir, c.Name, attempt), rt.LogOptions{Tail: terminationLogLines}, &buf, &buf); err != nil {
		return ""
	}
	b := buf.Bytes()
	if len(b) > maxTerminationLogMessage {
		b = b[len(b)-maxTerminationLogMessage:]
	}
	return string(b)
}

// readLast is the last n bytes of the file at path ("" when it cannot be read).
func readLast(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return string(b)
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}
