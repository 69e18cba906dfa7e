package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/nodes/host"
	"github.com/flotilla-dev/flotilla/reconciler/etcd"
)

// Leases are the elections a host can lead (their Lease in kube-system names the holder).
var Leases = map[string]string{"flotilla-controllers": "controllers", "flotilla-scheduler": "scheduler"}

// StatusOptions say which host to describe.
type StatusOptions struct {
	DataDir string
	// Name is the host name; default the running agent's --name, else the system host name.
	Name string
	// Version is this binary's version.
	Version string
	// Timeout bounds the API requests; default 5s.
	Timeout time.Duration
}

// Line is one "key: value" of the status.
type Line struct{ Key, Value string }

// Status describes what runs on the host of DataDir: the agent process, its role from
// cluster.json, and from the API (DataDir/kubeconfig) the site, the elections it leads and
// its pods. What cannot be read is said so on its line; the error is only for a data
// directory that does not exist.
func Status(ctx context.Context, o StatusOptions) ([]Line, error) {
	if o.DataDir == "" {
		return nil, fmt.Errorf("--data-dir is required: the agent's data directory")
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("data directory %s: %w: check --data-dir (no agent ran with it on this machine?)", dir, err)
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	var lines []Line
	add := func(k, v string) { lines = append(lines, Line{k, v}) }

	agent, running := host.FindAgent(dir)
	name := o.Name
	if name == "" && running {
		name = agent.Flag("name")
	}
	if name == "" {
		name, _ = os.Hostname()
	}
	add("host", name)
	add("data dir", dir)
	if running {
		add("agent", fmt.Sprintf("running (pid %d)", agent.PID))
	} else {
		add("agent", "not running (no agent process for this data directory)")
	}

	st, err := etcd.LoadClusterState(filepath.Join(dir, "cluster.json"))
	switch {
	case err != nil:
		add("role", "unknown: "+err.Error())
	case st == nil:
		add("role", "none yet (no cluster.json: the agent never joined a site)")
	case st.Worker:
		add("role", "worker")
		add("etcd", "not a member (workers hold no etcd)")
	case st.Member:
		add("role", "voter")
		add("etcd", "member")
	default:
		add("role", "standby")
		add("etcd", "not a member (waits for a free seat)")
	}

	version := "flotilla " + o.Version + " (this binary)"
	kc := filepath.Join(dir, "kubeconfig")
	if _, err := os.Stat(kc); err != nil {
		add("version", version)
		add("api", "no admin kubeconfig in the data directory (a worker has none): site, leases and pods unknown")
		return lines, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		add("version", version)
		add("api", "unusable kubeconfig: "+err.Error())
		return lines, nil
	}
	cfg.Timeout = o.Timeout
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		add("version", version)
		add("api", err.Error())
		return lines, nil
	}
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	node, err := c.CoreV1().Nodes().Get(rctx, name, metav1.GetOptions{})
	if err != nil {
		add("version", version)
		why := "unreachable"
		if !running {
			why = "unreachable (the agent is not running)"
		}
		add("api", fmt.Sprintf("%s %s: %v", cfg.Host, why, short(err)))
		return lines, nil
	}
	add("version", fmt.Sprintf("Kubernetes %s (the Node's status), %s", node.Status.NodeInfo.KubeletVersion, version))
	add("api", cfg.Host)
	if cm, err := c.CoreV1().ConfigMaps("kube-system").Get(rctx, "flotilla-site", metav1.GetOptions{}); err == nil {
		add("site", cm.Data["name"])
	} else {
		add("site", "unknown: "+short(err))
	}
	var leads []string
	for lease, what := range Leases {
		l, err := c.CoordinationV1().Leases("kube-system").Get(rctx, lease, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == name {
			leads = append(leads, what)
		}
	}
	sort.Strings(leads)
	if len(leads) == 0 {
		add("leader of", "nothing")
	} else {
		add("leader of", strings.Join(leads, ", "))
	}
	pods, err := c.CoreV1().Pods("").List(rctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
	if err != nil {
		add("pods", "unknown: "+short(err))
		return lines, nil
	}
	phases := map[corev1.PodPhase]int{}
	for _, p := range pods.Items {
		phases[p.Status.Phase]++
	}
	var parts []string
	for _, ph := range []corev1.PodPhase{corev1.PodRunning, corev1.PodPending, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown} {
		if phases[ph] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", phases[ph], ph))
		}
	}
	v := fmt.Sprint(len(pods.Items))
	if len(parts) > 0 {
		v += " (" + strings.Join(parts, ", ") + ")"
	}
	add("pods", v)
	return lines, nil
}

// Format renders lines as an aligned "key: value" table.
func Format(lines []Line) string {
	w := 0
	for _, l := range lines {
		w = max(w, len(l.Key))
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%-*s %s\n", w+1, l.Key+":", l.Value)
	}
	return b.String()
}

func short(err error) string {
	s := err.Error()
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
