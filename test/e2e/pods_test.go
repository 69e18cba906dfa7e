package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

const (
	toolbox = "flotilla.local/toolbox:latest"
	hello   = "flotilla.local/hello:latest"
)

// imagesDir returns the example image tarballs: $FLOTILLA_IMAGES (set by make), or packed
// now with hack/pack-images.sh.
func imagesDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("FLOTILLA_IMAGES"); d != "" {
		return d
	}
	cmd := exec.Command("hack/pack-images.sh")
	cmd.Dir = framework.RepoRoot()
	cmd.Env = append(os.Environ(), "FLOTILLA_BIN="+framework.FlotillaBin(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pack the example images: %v\n%s", err, out)
	}
	return filepath.Join(framework.RepoRoot(), "bin", "images")
}

// sideLoad puts the example images where every host's agent imports them.
func sideLoad(t testing.TB, s *devsite.Site) {
	t.Helper()
	dir := imagesDir(t)
	tars, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
	if len(tars) == 0 {
		t.Fatalf("no image tarballs in %s", dir)
	}
	for _, h := range s.Hosts {
		dest := filepath.Join(h.DataDir, "images")
		if err := os.MkdirAll(dest, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, tar := range tars {
			b, err := os.ReadFile(tar)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dest, filepath.Base(tar)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func clientOf(t testing.TB, h *devsite.Host) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", h.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return kubernetes.NewForConfigOrDie(cfg)
}

func getPod(c kubernetes.Interface, name string) (*corev1.Pod, error) {
	return c.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func statusOf(p *corev1.Pod, container string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == container {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func describe(p *corev1.Pod) string {
	if p == nil {
		return "no pod"
	}
	s := fmt.Sprintf("phase=%s node=%s ip=%s", p.Status.Phase, p.Spec.NodeName, p.Status.PodIP)
	for _, cs := range p.Status.ContainerStatuses {
		s += fmt.Sprintf(" [%s ready=%v restarts=%d state=%+v last=%+v]", cs.Name, cs.Ready, cs.RestartCount, cs.State, cs.LastTerminationState)
	}
	return s
}

func waitPod(t testing.TB, c kubernetes.Interface, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	waitFor(t, timeout, "pod "+name+" "+what, func() (bool, string) {
		p, err := getPod(c, name)
		if err != nil {
			return false, err.Error()
		}
		last = p
		return cond(p), describe(p)
	})
	return last
}

func tool(name string, args ...string) corev1.Container {
	return corev1.Container{Name: name, Image: toolbox, ImagePullPolicy: corev1.PullIfNotPresent,
		Command: append([]string{"/app"}, args...)}
}

func newPod(name, node string, restart corev1.RestartPolicy, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"test": name}},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: restart, Containers: containers,
			TerminationGracePeriodSeconds: ptr.To(int64(10))}}
}

func create(t testing.TB, c kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	if _, err := c.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
}

func kubectlOut(t testing.TB, h *devsite.Host, args ...string) string {
	t.Helper()
	out, err := h.Kubectl(context.Background(), "", args...)
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return out
}

// TestPodsRunOnContainerd is the node agent's acceptance: pods on real containerd + runc in
// a 3-host site, scheduled by the leader's scheduler or pinned to a host.
func TestPodsRunOnContainerd(t *testing.T) {
	s := newSite(t, 3)
	sideLoad(t, s)
	startSite(t, s)
	c := clientOf(t, s.Hosts[0])
	waitFor(t, 2*time.Minute, "3 Ready nodes with pod CIDRs", func() (bool, string) {
		nodes, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ok := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && n.Spec.PodCIDR != "" {
					ok++
				}
			}
		}
		return ok == 3, fmt.Sprintf("%d ready", ok)
	})

	t.Run("simple pod is Ready and logs", func(t *testing.T) {
		p := newPod("simple", "", corev1.RestartPolicyAlways, corev1.Container{Name: "hello", Image: hello,
			ImagePullPolicy: corev1.PullIfNotPresent, Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}})
		create(t, c, p)
		got := waitPod(t, c, "simple", 90*time.Second, "Running and Ready", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && podReady(p) })
		if got.Spec.NodeName == "" || got.Status.PodIP == "" {
			t.Fatalf("scheduled pod without node or IP: %s", describe(got))
		}
		logs := kubectlOut(t, s.Hosts[1], "logs", "simple")
		if !strings.Contains(logs, "listening on :8080 (pod simple") {
			t.Fatalf("kubectl logs through another host's API: %q", logs)
		}
	})

	t.Run("config in env and volumes, init containers in order", func(t *testing.T) {
		if _, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"greeting": "hi from a configmap", "mode": "edge"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		show := tool("show", "cat", "/cfg/greeting", "/data/order")
		show.Env = []corev1.EnvVar{{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "mode"}}}}
		show.VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}, {Name: "data", MountPath: "/data"}}
		env := tool("env", "env")
		env.Env = show.Env
		p := newPod("config", "host-2", corev1.RestartPolicyNever, show, env)
		i1, i2 := tool("init-1", "append", "/data/order", "init-1"), tool("init-2", "append", "/data/order", "init-2")
		i1.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		i2.VolumeMounts = i1.VolumeMounts
		p.Spec.InitContainers = []corev1.Container{i1, i2}
		p.Spec.Volumes = []corev1.Volume{
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}
		create(t, c, p)
		waitPod(t, c, "config", 90*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		if out := kubectlOut(t, s.Hosts[0], "logs", "config", "-c", "show"); out != "hi from a configmapinit-1\ninit-2\n" {
			t.Fatalf("configMap volume and init order seen inside the container: %q", out)
		}
		out := kubectlOut(t, s.Hosts[0], "logs", "config", "-c", "env")
		for _, want := range []string{"MODE=edge", "HOSTNAME=config", "KUBERNETES_SERVICE_HOST="} {
			if !strings.Contains(out, want) {
				t.Errorf("environment lacks %s:\n%s", want, out)
			}
		}
	})

	t.Run("crash loop backs off", func(t *testing.T) {
		create(t, c, newPod("crasher", "host-3", corev1.RestartPolicyAlways, tool("crash", "exit", "3", "crashing")))
		p := waitPod(t, c, "crasher", 90*time.Second, "in CrashLoopBackOff after 2 restarts", func(p *corev1.Pod) bool {
			cs := statusOf(p, "crash")
			return cs != nil && cs.RestartCount >= 2 && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff"
		})
		cs := statusOf(p, "crash")
		if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 3 {
			t.Fatalf("lastState should record exit code 3: %s", describe(p))
		}
		// The back-off doubles: after restart 2 the next start waits 20 s, so the count
		// stays put for a while. A crash that exits at once without back-off would restart
		// several times in the 5 s window (a wall-clock span shorter than the back-off).
		n := cs.RestartCount
		holdsFor(t, 5*time.Second, "restarts back off", func() (bool, string) {
			p, err := getPod(c, "crasher")
			if err != nil {
				return false, err.Error()
			}
			got := statusOf(p, "crash").RestartCount
			return got <= n+1, fmt.Sprintf("restarts did not back off: %d -> %d within 5 s", n, got)
		})
	})

	// As upstream: a process that cannot start is an exit with code 128 and reason
	// StartError, which the restart policy handles like any other.
	t.Run("a missing command is a start error", func(t *testing.T) {
		missing := corev1.Container{Name: "missing", Image: toolbox, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"/no/such/binary"}}
		create(t, c, newPod("start-once", "host-2", corev1.RestartPolicyNever, missing))
		create(t, c, newPod("start-again", "host-3", corev1.RestartPolicyAlways, missing))
		p := waitPod(t, c, "start-once", 90*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		term := statusOf(p, "missing").State.Terminated
		if term == nil || term.Reason != "StartError" || term.ExitCode != 128 || !strings.Contains(term.Message, "/no/such/binary") {
			t.Fatalf("want terminated StartError, 128, the command in the message: %s", describe(p))
		}
		p = waitPod(t, c, "start-again", 90*time.Second, "restarted twice, waiting", func(p *corev1.Pod) bool {
			cs := statusOf(p, "missing")
			return cs != nil && cs.RestartCount >= 2 && cs.State.Waiting != nil
		})
		cs := statusOf(p, "missing")
		if r := cs.State.Waiting.Reason; r != "CrashLoopBackOff" && r != "RunContainerError" {
			t.Errorf("waiting %q, want CrashLoopBackOff or RunContainerError: %s", r, describe(p))
		}
		if last := cs.LastTerminationState.Terminated; last == nil || last.Reason != "StartError" || last.ExitCode != 128 {
			t.Errorf("lastState should be the start error: %s", describe(p))
		}
	})

	// As the kubelet: a file bound at terminationMessagePath (writable by any user), read once
	// the container ended; with FallbackToLogsOnError a failed container's log instead.
	t.Run("termination messages", func(t *testing.T) {
		file := tool("file", "write", "/dev/termination-log", "all done")
		file.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To(int64(1000))}
		logs := tool("logs", "exit", "3", "crashing")
		logs.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
		create(t, c, newPod("farewell", "host-1", corev1.RestartPolicyNever, file, logs))
		p := waitPod(t, c, "farewell", 90*time.Second, "both containers terminated", func(p *corev1.Pod) bool {
			f, l := statusOf(p, "file"), statusOf(p, "logs")
			return f != nil && l != nil && f.State.Terminated != nil && l.State.Terminated != nil
		})
		if term := statusOf(p, "file").State.Terminated; term.ExitCode != 0 || term.Message != "all done" {
			t.Errorf("the file's message: %s", describe(p))
		}
		if term := statusOf(p, "logs").State.Terminated; term.ExitCode != 3 || !strings.Contains(term.Message, "crashing") {
			t.Errorf("the log's message: %s", describe(p))
		}
	})

	t.Run("setHostnameAsFQDN: the containers' hostname is the pod's FQDN", func(t *testing.T) {
		p := newPod("fqdn", "host-3", corev1.RestartPolicyNever, tool("show", "cat", "/etc/hostname"))
		p.Spec.Hostname, p.Spec.Subdomain, p.Spec.SetHostnameAsFQDN = "web-0", "web", ptr.To(true)
		create(t, c, p)
		waitPod(t, c, "fqdn", 60*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		if out, want := kubectlOut(t, s.Hosts[0], "logs", "fqdn"), "web-0.web.default.svc.cluster.local\n"; out != want {
			t.Fatalf("/etc/hostname: %q, want %q", out, want)
		}
	})

	// As the kubelet: a pod active longer than spec.activeDeadlineSeconds is stopped and
	// fails with reason DeadlineExceeded, and is not started again.
	t.Run("activeDeadlineSeconds ends the pod", func(t *testing.T) {
		p := newPod("deadline", "host-2", corev1.RestartPolicyAlways, tool("sleeper", "sleep", "600s"))
		p.Spec.ActiveDeadlineSeconds = ptr.To(int64(3))
		create(t, c, p)
		p = waitPod(t, c, "deadline", 60*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if p.Status.Reason != "DeadlineExceeded" || !strings.Contains(p.Status.Message, "longer than the specified deadline") {
			t.Fatalf("reason %q message %q, want DeadlineExceeded", p.Status.Reason, p.Status.Message)
		}
		if cs := statusOf(p, "sleeper"); cs == nil || cs.State.Terminated == nil || cs.RestartCount != 0 {
			t.Fatalf("the container should have been stopped, not restarted: %s", describe(p))
		}
		if p.Status.StartTime == nil {
			t.Fatalf("no start time: %s", describe(p))
		}
		waitFor(t, 30*time.Second, "the DeadlineExceeded event", func() (bool, string) {
			evs, err := c.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=deadline"})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.Reason == "DeadlineExceeded" {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d events, none DeadlineExceeded", len(evs.Items))
		})
	})

	t.Run("memory limit kills with OOMKilled", func(t *testing.T) {
		ctr := tool("hog", "alloc", "200")
		ctr.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")}
		create(t, c, newPod("oom", "host-1", corev1.RestartPolicyNever, ctr))
		p := waitPod(t, c, "oom", 90*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		term := statusOf(p, "hog").State.Terminated
		if term == nil || term.Reason != "OOMKilled" || term.ExitCode != 137 {
			t.Fatalf("want OOMKilled with 137: %s", describe(p))
		}
	})

	t.Run("probes: liveness restarts, readiness gates Ready", func(t *testing.T) {
		live := tool("app", "serve", "8080")
		live.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9999)}},
			PeriodSeconds: 1, FailureThreshold: 2}
		create(t, c, newPod("unlive", "host-2", corev1.RestartPolicyAlways, live))
		notReady := tool("app", "serve", "8080")
		notReady.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/app", "exists", "/tmp/ready"}}},
			PeriodSeconds: 1}
		create(t, c, newPod("unready", "host-3", corev1.RestartPolicyAlways, notReady))
		waitPod(t, c, "unlive", 90*time.Second, "restarted by its liveness probe", func(p *corev1.Pod) bool {
			cs := statusOf(p, "app")
			return cs != nil && cs.RestartCount >= 1
		})
		waitPod(t, c, "unready", 60*time.Second, "running", func(p *corev1.Pod) bool {
			cs := statusOf(p, "app")
			return cs != nil && cs.State.Running != nil
		})
		// A failing readiness probe that starts unready leaves no event to wait for. It runs
		// every second from the container's start with the default failureThreshold 3: a
		// readiness failure taken for a liveness one would restart the container within 3 s.
		holdsFor(t, 4*time.Second, "unready stays unready without restarts", func() (bool, string) {
			p, err := getPod(c, "unready")
			if err != nil {
				return false, err.Error()
			}
			cs := statusOf(p, "app")
			return !podReady(p) && cs != nil && !cs.Ready && cs.RestartCount == 0,
				"a failing readiness probe must keep Ready=False without restarts: " + describe(p)
		})
	})

	t.Run("kubectl exec through another host's API", func(t *testing.T) {
		out, err := s.Hosts[1].Kubectl(context.Background(), "", "exec", "unready", "--", "/app", "touch", "/tmp/ready")
		if err != nil {
			t.Fatalf("kubectl exec: %v %s", err, out)
		}
		// The file the readiness probe looks for now exists: the pod turns Ready.
		waitPod(t, c, "unready", 30*time.Second, "Ready after exec", podReady)
		out, err = s.Hosts[0].Kubectl(context.Background(), "", "exec", "unready", "--", "/app", "exit", "3", "bye")
		if err == nil || !strings.Contains(out, "bye") || !strings.Contains(err.Error(), "exit code 3") {
			t.Fatalf("a failing command's output and exit code: %v %q", err, out)
		}
		out, err = s.Hosts[0].Kubectl(context.Background(), "piped input\n", "exec", "-i", "unready", "--", "/app", "cat", "/dev/stdin")
		if err != nil || out != "piped input\n" {
			t.Fatalf("stdin through exec: %v %q", err, out)
		}
	})

	t.Run("kubectl port-forward through another host's API", func(t *testing.T) {
		port := framework.FreePort(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cmd := exec.CommandContext(ctx, framework.KubectlBin(t), "--kubeconfig", s.Hosts[1].Kubeconfig(), "port-forward",
			"pod/simple", fmt.Sprintf("%d:8080", port))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = cmd.Wait() }()
		for i := 0; i < 3; i++ { // several connections over one port-forward
			waitFor(t, 30*time.Second, "the pod answers on the forwarded loopback port", func() (bool, string) {
				code, body, err := get(fmt.Sprintf("http://127.0.0.1:%d/", port), "")
				return code == 200 && strings.Contains(body, "hello from simple"), fmt.Sprint(code, body, err, out.String())
			})
		}
	})

	t.Run("a pod on host 1 reaches a pod on host 3", func(t *testing.T) {
		create(t, c, newPod("server", "host-3", corev1.RestartPolicyAlways, tool("app", "serve", "8080")))
		srv := waitPod(t, c, "server", 60*time.Second, "running with an IP", func(p *corev1.Pod) bool {
			cs := statusOf(p, "app")
			return cs != nil && cs.State.Running != nil && p.Status.PodIP != ""
		})
		create(t, c, newPod("client", "host-1", corev1.RestartPolicyOnFailure, tool("get", "get", "http://"+srv.Status.PodIP+":8080/")))
		waitPod(t, c, "client", 60*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		if out := kubectlOut(t, s.Hosts[0], "logs", "client"); !strings.Contains(out, "server") {
			t.Fatalf("client got %q from %s", out, srv.Status.PodIP)
		}
	})

	t.Run("delete runs preStop, then SIGTERM", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "signals")
		if err := os.MkdirAll(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		app := tool("app", "signals", "/rec/log")
		app.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/app", "append", "/rec/log", "preStop"}}}}
		app.VolumeMounts = []corev1.VolumeMount{{Name: "rec", MountPath: "/rec"}}
		p := newPod("graceful", "host-2", corev1.RestartPolicyAlways, app)
		p.Spec.Volumes = []corev1.Volume{{Name: "rec", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}}
		// hostPath volumes need a privileged namespace: the site default (baseline) refuses them.
		kubectlOut(t, s.Hosts[0], "label", "--overwrite", "namespace", "default", "pod-security.kubernetes.io/enforce=privileged", "pod-security.kubernetes.io/warn=privileged")
		create(t, c, p)
		waitPod(t, c, "graceful", 60*time.Second, "running", func(p *corev1.Pod) bool {
			cs := statusOf(p, "app")
			return cs != nil && cs.State.Running != nil
		})
		// The app prints this once its SIGTERM handler is installed.
		waitFor(t, 30*time.Second, "graceful waits for SIGTERM", func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := s.Hosts[0].Kubectl(ctx, "", "logs", "graceful")
			return err == nil && strings.Contains(out, "waiting for SIGTERM"), fmt.Sprint(out, err)
		})
		if err := c.CoreV1().Pods("default").Delete(context.Background(), "graceful", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "pod graceful gone", func() (bool, string) {
			_, err := getPod(c, "graceful")
			return err != nil, fmt.Sprint(err)
		})
		b, _ := os.ReadFile(filepath.Join(dir, "log"))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 || lines[0] != "preStop" || !strings.HasPrefix(lines[1], "SIGTERM ") {
			t.Fatalf("the app should record preStop then SIGTERM, got %q", lines)
		}
	})

	t.Run("start latency of 20 pods", func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var lat []time.Duration
		for i := 0; i < 20; i++ {
			ctr := corev1.Container{Name: "hello", Image: hello, ImagePullPolicy: corev1.PullIfNotPresent,
				Resources:      corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}}
			create(t, c, newPod(fmt.Sprintf("lat-%02d", i), "", corev1.RestartPolicyAlways, ctr))
		}
		waitFor(t, 3*time.Minute, "20 pods Ready", func() (bool, string) {
			pods, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			mu.Lock()
			defer mu.Unlock()
			lat = lat[:0]
			for _, p := range pods.Items {
				if !strings.HasPrefix(p.Name, "lat-") || !podReady(p.DeepCopy()) {
					continue
				}
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady {
						lat = append(lat, cond.LastTransitionTime.Sub(p.CreationTimestamp.Time))
					}
				}
			}
			return len(lat) == 20, fmt.Sprintf("%d Ready", len(lat))
		})
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("pod start latency (create -> Ready, 1 s resolution) for 20 pods: p50 %s, max %s, all Ready after %s",
			lat[9], lat[19], time.Since(start).Round(100*time.Millisecond))
	})
	// Last: it restarts host-3's agent (and with it that host's etcd member).
	t.Run("declared features: listed on the Node, a pod needing another is refused", func(t *testing.T) {
		node, err := c.CoreV1().Nodes().Get(context.Background(), s.Hosts[2].Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Status.DeclaredFeatures; len(got) != 1 || got[0] != "ExtendWebSocketsToKubelet" {
			t.Fatalf("status.declaredFeatures = %v, want [ExtendWebSocketsToKubelet]", got)
		}
		// The agent is authoritative: an edit is overwritten by the next heartbeat.
		node.Status.DeclaredFeatures = []string{"ExtendWebSocketsToKubelet", "RestartAllContainersOnContainerExits"}
		if _, err := c.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the agent restores its declared features", func() (bool, string) {
			n, err := c.CoreV1().Nodes().Get(context.Background(), s.Hosts[2].Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return len(n.Status.DeclaredFeatures) == 1, fmt.Sprint(n.Status.DeclaredFeatures)
		})
		// Fixture B.60: restart the whole pod on exit code 42, which needs
		// RestartAllContainersOnContainerExits (not implemented by this agent).
		never := corev1.ContainerRestartPolicy("Never")
		rule := corev1.Container{Name: "main", Image: hello, ImagePullPolicy: corev1.PullIfNotPresent, RestartPolicy: &never,
			RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}}
		create(t, c, newPod("needs-feature-bound", s.Hosts[2].Name, corev1.RestartPolicyNever, rule))
		got := waitPod(t, c, "needs-feature-bound", 60*time.Second, "Failed by the node's admission", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodFailed
		})
		if got.Status.Reason != "NodeDeclaredFeatures" || !strings.Contains(got.Status.Message, "RestartAllContainersOnContainerExits") {
			t.Fatalf("refused pod status %q %q, want reason NodeDeclaredFeatures naming the feature", got.Status.Reason, got.Status.Message)
		}
		for _, cs := range got.Status.ContainerStatuses {
			if cs.State.Running != nil || cs.State.Terminated != nil {
				t.Fatalf("a refused pod must not have run: %+v", cs)
			}
		}
		create(t, c, newPod("needs-feature", "", corev1.RestartPolicyNever, rule))
		waitPod(t, c, "needs-feature", 60*time.Second, "Pending, unschedulable for the missing feature", func(p *corev1.Pod) bool {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && strings.Contains(cond.Message, "RestartAllContainersOnContainerExits") {
					return p.Spec.NodeName == ""
				}
			}
			return false
		})
	})

	t.Run("agent restart keeps containers", func(t *testing.T) {
		ids := map[string]string{}
		pods, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=host-3"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running != nil {
					ids[p.Name+"/"+cs.Name] = cs.ContainerID
				}
			}
		}
		if len(ids) == 0 {
			t.Fatal("no running containers on host-3 to check")
		}
		h := s.Hosts[2]
		started := agentStarts(h)
		if err := h.Stop(15 * time.Second); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		if err := h.Restart(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := h.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		waitAgentBack(t, c, h, restarted, started)
		// The new agent started a worker for every pod as it listed them, before it logged its
		// workers running; a worker that did not adopt its running container would replace it
		// on its first sync, or at the latest on its 2 s resync: 3 s show it.
		holdsFor(t, 3*time.Second, "the containers kept across the agent restart", func() (bool, string) {
			for key, id := range ids {
				name, ctr, _ := strings.Cut(key, "/")
				if name == "crasher" {
					continue // it restarts by itself
				}
				p, err := getPod(c, name)
				if err != nil {
					return false, err.Error()
				}
				if cs := statusOf(p, ctr); cs == nil || cs.ContainerID != id || cs.State.Running == nil {
					return false, fmt.Sprintf("%s: container %s changed across the agent restart: %s", key, id, describe(p))
				}
			}
			return true, ""
		})
	})

}
