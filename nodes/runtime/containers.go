package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types/runc/options"
	tasktypes "github.com/containerd/containerd/api/types/task"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/platforms"
	"github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
)

// Mount is a bind mount of a host path or a tmpfs inside the container.
type Mount struct {
	Source, Destination string
	ReadOnly            bool
	// Type is "bind" (the default) or "tmpfs".
	Type    string
	Options []string
}

// User is the numeric user (and optionally group) the container's process runs as.
type User struct {
	UID int64
	GID *int64
}

// ContainerConfig describes a container to create.
type ContainerConfig struct {
	ID, Image string
	Labels    map[string]string
	// Command and Args follow Kubernetes: Command replaces the image's Entrypoint and drops its
	// Cmd; Args alone replace the Cmd.
	Command, Args []string
	// Env is KEY=VALUE, merged over the image's Env.
	Env []string
	// NetNSPath, when set, is an existing network namespace the container joins.
	WorkingDir, Hostname, NetNSPath string
	// HostNetwork runs the container in the host's network and UTS namespaces (hostNetwork
	// pods); NetNSPath and Hostname are then ignored.
	HostNetwork bool
	Mounts      []Mount
	// User nil runs as the image's user. A User without GID takes the group /etc/passwd of
	// the image gives the UID, else 0.
	User *User
	// Group, with User nil, runs the image's user (root without one) with this primary group.
	Group *int64
	// RunAsNonRoot refuses to create a container that would run as root, or whose image user
	// is a name: CreateContainer returns a *NonRootError.
	RunAsNonRoot bool
	// SupplementalGroups are added to the process's groups: its primary group and those the
	// image's /etc/group lists its user in, which StrictSupplementalGroups leaves out.
	SupplementalGroups       []int64
	StrictSupplementalGroups bool
	ReadOnlyRootfs           bool
	// Privileged gives every capability and device, unmasks /proc and /sys and runs without
	// seccomp and the default AppArmor profile.
	Privileged bool
	// CapAdd and CapDrop change the default capabilities; they take "NET_ADMIN",
	// "CAP_NET_ADMIN" or "ALL".
	CapAdd, CapDrop []string
	// NoNewPrivileges sets no_new_privs (allowPrivilegeEscalation false); without it the
	// process may gain privileges through setuid binaries and file capabilities.
	NoNewPrivileges bool
	// HostPID and HostIPC run the container in the host's PID and IPC namespaces.
	HostPID, HostIPC bool
	// Sysctls are set in the container's namespaces, e.g. net.ipv4.ip_local_port_range.
	Sysctls map[string]string
	// Seccomp is the container's seccomp profile (zero: unconfined); AppArmor its AppArmor
	// profile (zero: unconfined), which needs a kernel with AppArmor enabled.
	Seccomp, AppArmor Profile
	// Resource limits; 0 leaves a limit unset.
	CPUShares   uint64
	CPUQuota    int64
	CPUPeriod   uint64
	MemoryLimit int64
	// LogPath receives stdout and stderr in CRI format; empty discards them.
	LogPath string
}

// State is a container's lifecycle state.
type State string

// The container states.
const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited"
	StateUnknown State = "unknown"
)

// ContainerStatus is what the runtime knows about a container; it survives restarts of the agent
// and of containerd.
type ContainerStatus struct {
	ID, Image, ImageID               string
	Labels                           map[string]string
	State                            State
	Pid                              uint32
	ExitCode                         int32
	CreatedAt, StartedAt, FinishedAt time.Time
	OOMKilled                        bool
	// StartError is why the process never started (its command missing, a mount refused):
	// the container is then exited with StartErrorExitCode, as containerd's CRI reports it.
	StartError string
}

// StartErrorExitCode is the exit code of a container whose process could not start.
const StartErrorExitCode = 128

// StartError is a start that failed for the container's own reasons: the runtime recorded
// it, and the container is exited with StartErrorExitCode.
type StartError struct {
	ID  string
	Err error
}

func (e *StartError) Error() string { return fmt.Sprintf("start container %s: %v", e.ID, e.Err) }
func (e *StartError) Unwrap() error { return e.Err }

// Labels of our own on every container; they persist the status in containerd's metadata.
const (
	labelPrefix     = "runtime.flotilla.dev/"
	labelImage      = labelPrefix + "image"
	labelImageID    = labelPrefix + "image-id"
	labelLogPath    = labelPrefix + "log-path"
	labelStartedAt  = labelPrefix + "started-at"
	labelFinishedAt = labelPrefix + "finished-at"
	labelExitCode   = labelPrefix + "exit-code"
	labelOOMKilled  = labelPrefix + "oom-killed"
	labelStartError = labelPrefix + "start-error"
)

func notFound(what string, err error) error {
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// CreateContainer creates the container (its rootfs snapshot and OCI spec); it does not start it.
func (r *Runtime) CreateContainer(ctx context.Context, c ContainerConfig) error {
	ctx = r.ns(ctx)
	if c.ID == "" {
		return errors.New("create container: empty ID")
	}
	im, err := r.resolveImage(ctx, c.Image)
	if err != nil {
		return fmt.Errorf("create container %s: %w", c.ID, err)
	}
	name := im.Name
	img := containerd.NewImageWithPlatform(r.client, im, platforms.DefaultStrict())
	if ok, err := img.IsUnpacked(ctx, ""); err == nil && !ok {
		if err := img.Unpack(ctx, ""); err != nil {
			return fmt.Errorf("create container %s: unpack image %s: %w", c.ID, name, err)
		}
	}
	ociImg, err := img.Spec(ctx)
	if err != nil {
		return fmt.Errorf("create container %s: read image %s config: %w", c.ID, name, err)
	}
	args := resolveArgs(ociImg.Config.Entrypoint, ociImg.Config.Cmd, c.Command, c.Args)
	if len(args) == 0 {
		return fmt.Errorf("create container %s: no command to run: image %s has no entrypoint or cmd, set command", c.ID, name)
	}
	cfgDesc, err := img.Config(ctx)
	if err != nil {
		return fmt.Errorf("create container %s: image %s config: %w", c.ID, name, err)
	}
	if err := checkNonRoot(c, ociImg.Config.User); err != nil {
		return fmt.Errorf("create container %s: %w", c.ID, err)
	}
	if c.LogPath != "" && r.cfg.LoggerBinary == "" {
		return fmt.Errorf("create container %s: LogPath needs Config.LoggerBinary (the flotilla binary)", c.ID)
	}

	labels := map[string]string{}
	for k, v := range c.Labels {
		labels[k] = v
	}
	labels[labelImage] = name
	labels[labelImageID] = cfgDesc.Digest.String()
	if c.LogPath != "" {
		labels[labelLogPath] = c.LogPath
	}

	specOpts := []oci.SpecOpts{
		oci.WithImageConfig(img),
		oci.WithProcessArgs(args...),
		oci.WithCgroup(r.CgroupPath(c.ID)),
	}
	if len(c.Env) > 0 {
		specOpts = append(specOpts, oci.WithEnv(c.Env))
	}
	if c.WorkingDir != "" {
		specOpts = append(specOpts, oci.WithProcessCwd(c.WorkingDir))
	}
	if c.HostNetwork {
		specOpts = append(specOpts, oci.WithHostNamespace(specs.NetworkNamespace), oci.WithHostNamespace(specs.UTSNamespace))
		c.NetNSPath, c.Hostname = "", ""
	}
	if c.Hostname != "" {
		specOpts = append(specOpts, oci.WithHostname(c.Hostname))
	}
	if c.NetNSPath != "" {
		specOpts = append(specOpts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: c.NetNSPath}))
	}
	if len(c.Mounts) > 0 {
		specOpts = append(specOpts, withMounts(c.Mounts))
	}
	secOpts, err := securityOpts(c, ociImg.Config.User)
	if err != nil {
		return fmt.Errorf("create container %s: %w", c.ID, err)
	}
	specOpts = append(specOpts, secOpts...)
	if c.CPUShares > 0 {
		specOpts = append(specOpts, oci.WithCPUShares(c.CPUShares))
	}
	if c.CPUQuota > 0 {
		period := c.CPUPeriod
		if period == 0 {
			period = 100000
		}
		specOpts = append(specOpts, oci.WithCPUCFS(c.CPUQuota, period))
	}
	if c.MemoryLimit > 0 {
		specOpts = append(specOpts, oci.WithMemoryLimit(uint64(c.MemoryLimit)))
	}

	// A snapshot left by an earlier failed create would make this one fail.
	_ = r.client.SnapshotService("").Remove(ctx, c.ID)
	_, err = r.client.NewContainer(ctx, c.ID,
		containerd.WithImage(img),
		containerd.WithNewSnapshot(c.ID, img),
		containerd.WithRuntime(runcRuntime, &options.Options{Root: r.cfg.RuncRoot}),
		containerd.WithNewSpec(specOpts...),
		containerd.WithContainerLabels(labels),
	)
	if err != nil {
		_ = r.client.SnapshotService("").Remove(ctx, c.ID)
		return fmt.Errorf("create container %s from %s: %w", c.ID, name, err)
	}
	r.log.WithFields(logrus.Fields{"container": c.ID, "image": name}).Debug("container created")
	return nil
}

// CgroupPath is the cgroup of a container, as runc names it below the cgroup filesystem
// root: <CgroupParent>/<id>.
func (r *Runtime) CgroupPath(id string) string {
	parent := r.cfg.CgroupParent
	if parent == "" {
		parent = "/" + r.cfg.Namespace
	}
	return path.Join(parent, id)
}

// withMounts adds mounts, replacing default mounts (e.g. /dev/shm) at the same destination.
func withMounts(ms []Mount) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		dest := map[string]bool{}
		for _, m := range ms {
			dest[path.Clean(m.Destination)] = true
		}
		kept := s.Mounts[:0]
		for _, m := range s.Mounts {
			if !dest[path.Clean(m.Destination)] {
				kept = append(kept, m)
			}
		}
		s.Mounts = kept
		for _, m := range ms {
			typ, src, opts := mountOptions(m)
			s.Mounts = append(s.Mounts, specs.Mount{Type: typ, Source: src, Destination: m.Destination, Options: opts})
		}
		return nil
	}
}

func withCapChanges(add, drop []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		if s.Process.Capabilities == nil {
			s.Process.Capabilities = &specs.LinuxCapabilities{}
		}
		caps := computeCaps(s.Process.Capabilities.Bounding, add, drop)
		s.Process.Capabilities.Bounding = caps
		s.Process.Capabilities.Effective = caps
		s.Process.Capabilities.Permitted = caps
		return nil
	}
}

// StartContainer starts a created container's process; its output goes to the container's LogPath.
func (r *Runtime) StartContainer(ctx context.Context, id string) error {
	ctx = r.ns(ctx)
	cont, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return notFound("start container "+id, err)
	}
	labels, err := cont.Labels(ctx)
	if err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	if labels[labelStartedAt] != "" {
		return fmt.Errorf("start container %s: already started (create a new container to run again)", id)
	}
	ioc := cio.NullIO
	if lp := labels[labelLogPath]; lp != "" {
		if err := os.MkdirAll(filepath.Dir(lp), 0o755); err != nil {
			return fmt.Errorf("start container %s: create log directory: %w", id, err)
		}
		// The shim runs `<flotilla> logger --path <lp> ...` (argument order is a map's; the logger
		// copes). The rotation settings are fixed for the life of the container's logger.
		args := map[string]string{"logger": "", "--path": lp}
		if r.cfg.ContainerLogMaxSize > 0 {
			args["--max-size"] = strconv.FormatInt(r.cfg.ContainerLogMaxSize, 10)
			args["--max-files"] = strconv.Itoa(max(r.cfg.ContainerLogMaxFiles, 2))
		}
		ioc = cio.BinaryIO(r.cfg.LoggerBinary, args)
	}
	// A task left by an agent that died between creating and starting it blocks NewTask.
	if old, err := cont.Task(ctx, nil); err == nil {
		if st, err := old.Status(ctx); err == nil && st.Status == containerd.Running {
			_, err := cont.SetLabels(ctx, map[string]string{labelStartedAt: time.Now().UTC().Format(time.RFC3339Nano)})
			return err
		}
		if _, err := old.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("start container %s: delete stale task: %w", id, err)
		}
	}
	task, err := cont.NewTask(ctx, ioc)
	if err != nil {
		return r.startFailed(ctx, cont, fmt.Errorf("create task: %w", err))
	}
	startedAt := time.Now()
	if err := task.Start(ctx); err != nil {
		_, _ = task.Delete(ctx, containerd.WithProcessKill)
		return r.startFailed(ctx, cont, err)
	}
	if _, err := cont.SetLabels(ctx, map[string]string{labelStartedAt: startedAt.UTC().Format(time.RFC3339Nano)}); err != nil {
		return fmt.Errorf("start container %s: record start time: %w", id, err)
	}
	r.log.WithFields(logrus.Fields{"container": id, "pid": task.Pid()}).Debug("container started")
	return nil
}

// startFailed records a failed start as the container's exit (StartErrorExitCode, the
// error as the reason) and returns a *StartError, so that the restart policy decides what
// follows as for any exit: left created, the container would wait for ever. A start cut
// short by the caller or by containerd being unreachable is not the container's doing: it
// stays created, to be started again.
func (r *Runtime) startFailed(ctx context.Context, cont containerd.Container, err error) error {
	if ctx.Err() != nil || errdefs.IsUnavailable(err) || errdefs.IsCanceled(err) || errdefs.IsDeadlineExceeded(err) {
		return fmt.Errorf("start container %s: %w", cont.ID(), err)
	}
	msg := err.Error()
	if len(msg) > maxStartErrorLabel {
		msg = msg[:maxStartErrorLabel] + "..."
	}
	if _, lerr := cont.SetLabels(ctx, map[string]string{
		labelFinishedAt: time.Now().UTC().Format(time.RFC3339Nano),
		labelExitCode:   strconv.Itoa(StartErrorExitCode),
		labelStartError: msg,
	}); lerr != nil {
		return fmt.Errorf("start container %s: %w (and recording it: %v)", cont.ID(), err, lerr)
	}
	return &StartError{ID: cont.ID(), Err: err}
}

// maxStartErrorLabel keeps a recorded start error within containerd's 4,096 bytes a label.
const maxStartErrorLabel = 3000

// StopContainer sends SIGTERM, waits up to grace, then SIGKILL. It returns once the process has
// exited (nil if it was not running).
func (r *Runtime) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	ctx = r.ns(ctx)
	cont, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	task, err := cont.Task(ctx, nil)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	exitC, err := task.Wait(wctx)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("stop container %s: wait: %w", id, err)
	}
	st, err := task.Status(ctx)
	if err == nil && st.Status == containerd.Stopped {
		r.reap(ctx, id)
		return nil
	}
	if err := task.Kill(ctx, syscall.SIGTERM); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("stop container %s: SIGTERM: %w", id, err)
	}
	select {
	case <-exitC:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(grace):
		r.log.WithField("container", id).Info("grace period over; SIGKILL")
		if err := task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("stop container %s: SIGKILL: %w", id, err)
		}
		select {
		case <-exitC:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.reap(ctx, id)
	return nil
}

// RemoveContainer kills and deletes the task, the container and its snapshot; nil if absent.
func (r *Runtime) RemoveContainer(ctx context.Context, id string) error {
	ctx = r.ns(ctx)
	mu := r.reapLock(id)
	mu.Lock()
	defer mu.Unlock()
	defer r.reapMu.Delete(id)
	cont, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	if task, err := cont.Task(ctx, nil); err == nil {
		if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("remove container %s: delete task: %w", id, err)
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: load task: %w", id, err)
	}
	if err := cont.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	return nil
}

func (r *Runtime) reapLock(id string) *sync.Mutex {
	m, _ := r.reapMu.LoadOrStore(id, &sync.Mutex{})
	return m.(*sync.Mutex)
}

// reap records a stopped task's exit in the container's labels and deletes the task, so the
// status outlives the shim and containerd restarts, and no shim lingers per exited container.
func (r *Runtime) reap(ctx context.Context, id string) {
	ctx = r.ns(ctx)
	mu := r.reapLock(id)
	mu.Lock()
	defer mu.Unlock()
	log := r.log.WithField("container", id)
	cont, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return
	}
	task, err := cont.Task(ctx, nil)
	if err != nil {
		return
	}
	st, err := task.Status(ctx)
	if err != nil || st.Status != containerd.Stopped {
		return
	}
	labels := map[string]string{
		labelFinishedAt: st.ExitTime.UTC().Format(time.RFC3339Nano),
		labelExitCode:   strconv.FormatUint(uint64(st.ExitStatus), 10),
	}
	// The kernel's per-cgroup OOM-kill counter catches OOMs whose event we missed; the cgroup
	// goes away with the task, so read it first.
	if spec, err := cont.Spec(ctx); err == nil && spec.Linux != nil && oomKilled(spec.Linux.CgroupsPath) {
		labels[labelOOMKilled] = "true"
	}
	if _, err := cont.SetLabels(ctx, labels); err != nil {
		log.WithError(err).Warn("record container exit")
		return
	}
	if _, err := task.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		log.WithError(err).Warn("delete exited task")
	}
	log.WithFields(logrus.Fields{"exitCode": st.ExitStatus, "oomKilled": labels[labelOOMKilled] == "true"}).Debug("container exited")
}

// oomKilled reads the cgroup v1 memory controller's oom_kill counter of a container.
func oomKilled(cgroupsPath string) bool {
	if cgroupsPath == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", cgroupsPath, "memory.oom_control"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "oom_kill" && f[1] != "0" {
			return true
		}
	}
	return false
}

// ContainerStatus returns a container's status, or ErrNotFound.
func (r *Runtime) ContainerStatus(ctx context.Context, id string) (*ContainerStatus, error) {
	ctx = r.ns(ctx)
	info, err := r.client.ContainerService().Get(ctx, id)
	if err != nil {
		return nil, notFound("container "+id, err)
	}
	var proc *tasktypes.Process
	resp, err := r.client.TaskService().Get(ctx, &tasksapi.GetRequest{ContainerID: id})
	if err == nil {
		proc = resp.Process
	} else if !errdefs.IsNotFound(errgrpc.ToNative(err)) {
		return nil, fmt.Errorf("container %s task: %w", id, errgrpc.ToNative(err))
	}
	info, proc = r.settle(ctx, info, proc)
	st := statusFrom(info, proc)
	return &st, nil
}

// settle records the exit of a container whose task has stopped but whose exit the event
// reaper has not recorded yet, and returns the container as recorded then. So a status never
// shows an exit without what is recorded with it (the OOM kill, read from the cgroup
// before the task is deleted).
func (r *Runtime) settle(ctx context.Context, info containers.Container, proc *tasktypes.Process) (containers.Container, *tasktypes.Process) {
	if proc == nil || proc.Status != tasktypes.Status_STOPPED {
		return info, proc
	}
	r.reap(ctx, info.ID)
	fresh, err := r.client.ContainerService().Get(ctx, info.ID)
	if err != nil || fresh.Labels[labelFinishedAt] == "" {
		return info, proc
	}
	return fresh, nil
}

// ListContainers returns the status of every container in our namespace.
func (r *Runtime) ListContainers(ctx context.Context) ([]ContainerStatus, error) {
	ctx = r.ns(ctx)
	conts, err := r.client.ContainerService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	resp, err := r.client.TaskService().List(ctx, &tasksapi.ListTasksRequest{})
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", errgrpc.ToNative(err))
	}
	procs := map[string]*tasktypes.Process{}
	for _, p := range resp.Tasks {
		procs[p.ID] = p
	}
	out := make([]ContainerStatus, 0, len(conts))
	for _, c := range conts {
		c, p := r.settle(ctx, c, procs[c.ID])
		out = append(out, statusFrom(c, p))
	}
	return out, nil
}

// statusFrom derives a status from the container record (our labels) and its task, if any.
func statusFrom(c containers.Container, p *tasktypes.Process) ContainerStatus {
	st := ContainerStatus{
		ID:         c.ID,
		Image:      c.Labels[labelImage],
		ImageID:    c.Labels[labelImageID],
		Labels:     map[string]string{},
		CreatedAt:  c.CreatedAt,
		OOMKilled:  c.Labels[labelOOMKilled] == "true",
		StartError: c.Labels[labelStartError],
	}
	if st.Image == "" {
		st.Image = c.Image
	}
	for k, v := range c.Labels {
		if !strings.HasPrefix(k, labelPrefix) {
			st.Labels[k] = v
		}
	}
	st.StartedAt = parseTime(c.Labels[labelStartedAt])
	st.FinishedAt = parseTime(c.Labels[labelFinishedAt])
	switch {
	case p != nil:
		st.Pid = p.Pid
		switch p.Status {
		case tasktypes.Status_RUNNING, tasktypes.Status_PAUSED, tasktypes.Status_PAUSING:
			st.State = StateRunning
		case tasktypes.Status_STOPPED:
			st.State = StateExited
			st.Pid = 0
			st.ExitCode = int32(p.ExitStatus)
			if p.ExitedAt != nil {
				st.FinishedAt = p.ExitedAt.AsTime()
			}
		case tasktypes.Status_CREATED:
			st.State = StateCreated
		default:
			st.State = StateUnknown
		}
	case !st.FinishedAt.IsZero():
		st.State = StateExited
		code, _ := strconv.ParseInt(c.Labels[labelExitCode], 10, 32)
		st.ExitCode = int32(code)
	case !st.StartedAt.IsZero():
		// Started, but neither a task nor a recorded exit: the shim is gone (host reboot,
		// killed shim). The process is not running and its exit code is lost.
		st.State = StateUnknown
	default:
		st.State = StateCreated
	}
	if st.State == StateExited && !st.StartedAt.IsZero() && st.FinishedAt.Before(st.StartedAt) {
		st.FinishedAt = st.StartedAt
	}
	return st
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// RemoveCgroupParent removes a host's (now empty) cgroup parent, e.g. "/flotilla/host-1", from
// every cgroup v1 hierarchy and the unified one; runc creates it and never removes it. Test and
// teardown code calls it after removing the host's containers.
func RemoveCgroupParent(parent string) error {
	parent = path.Clean("/" + parent)
	if parent == "/" {
		return errors.New("remove cgroup parent: refusing to remove the root cgroup")
	}
	roots, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		return err
	}
	roots = append(roots, "/sys/fs/cgroup")
	var errs []error
	for _, root := range roots {
		// Deepest first: "/flotilla/host-1" then "/flotilla" (which fails harmlessly while
		// another host still uses it).
		for p := parent; p != "/"; p = path.Dir(p) {
			err := os.Remove(filepath.Join(root, p))
			if err == nil || errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				continue
			}
			if p == parent {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", filepath.Join(root, p), err))
			}
			break
		}
	}
	return errors.Join(errs...)
}
