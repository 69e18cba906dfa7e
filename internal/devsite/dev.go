package devsite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/internal/kubeclient"
)

// Dev is what `flotilla dev` does with a site directory: bring a site up, take it down,
// show it, and notify it of a push.
type Dev struct {
	// Dir holds the hosts' data, logs and the site's state (site.json).
	Dir string
	// Hosts is how many hosts Up creates (1-9).
	Hosts int
	// Bin is the flotilla binary the hosts run (default: this one); Kubectl is shown in the
	// instructions.
	Bin, Kubectl string
	// Images is a directory of OCI image tarballs side-loaded into every host.
	Images string
	// App is a directory committed to a local git repository that the site deploys from.
	App string
	// Out receives progress and instructions (default: stdout).
	Out io.Writer
}

func (o *Dev) out() io.Writer {
	if o.Out == nil {
		return os.Stdout
	}
	return o.Out
}

func (o *Dev) statePath() string { return filepath.Join(o.Dir, "site.json") }

// Up creates the hosts, starts an agent on each and, with App, deploys it from a local git
// repository; it prints progress and how to reach the site.
func (o *Dev) Up(ctx context.Context) error {
	if o.Hosts < 1 || o.Hosts > 9 {
		return fmt.Errorf("--hosts %d: use 1 to 9", o.Hosts)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	o.Dir = dir
	if _, err := os.Stat(o.statePath()); err == nil {
		fmt.Fprintf(o.out(), "a dev site already exists in %s:\n", o.Dir)
		if err := o.Status(ctx); err != nil {
			return err
		}
		return errors.New("run `flotilla dev down` (or `make demo-down`) first to start a new one")
	}
	if o.Bin == "" {
		if o.Bin, err = os.Executable(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	site, err := New(Options{Hosts: o.Hosts, Dir: o.Dir, Bin: o.Bin, Kubectl: o.Kubectl, Detach: true})
	if err != nil {
		return fmt.Errorf("create the hosts: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			site.Close()
			_ = os.Remove(o.statePath())
		}
	}()
	save := func() error { return site.Save(o.statePath()) }
	if err := save(); err != nil {
		return err
	}
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(o.out(), "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	for _, h := range site.Hosts {
		if err := sideLoadImages(o.Images, filepath.Join(h.DataDir, "images")); err != nil {
			return err
		}
	}
	var repo *GitRepo
	if o.App != "" {
		if repo, err = NewGitRepo(o.Dir, o.App); err != nil {
			return err
		}
		step("committed %s to %s (clone to edit: %s)", o.App, repo.Bare, repo.Work)
	}
	first := site.Hosts[0]
	step("starting %s at %s (etcd + Kubernetes API)", first.Name, first.IP)
	if err := first.Start(); err != nil {
		return err
	}
	if err := save(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := first.WaitReady(wctx); err != nil {
		return err
	}
	for _, h := range site.Hosts[1:] {
		step("starting %s at %s, joining %s", h.Name, h.IP, first.Name)
		if err := h.StartJoining(site.Hosts[:1]); err != nil {
			return err
		}
		if err := save(); err != nil {
			return err
		}
	}
	for _, h := range site.Hosts[1:] {
		if err := h.WaitReady(wctx); err != nil {
			return err
		}
		step("%s serves the API", h.Name)
	}
	client, err := clientFor(first.Kubeconfig())
	if err != nil {
		return err
	}
	for {
		n, err := readyNodeCount(wctx, client)
		if err == nil && n == o.Hosts {
			break
		}
		if wctx.Err() != nil {
			return fmt.Errorf("only %d of %d nodes Ready: %v", n, o.Hosts, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	step("%d hosts Ready", o.Hosts)
	url := ""
	if repo != nil {
		// The source is recorded once every host is Ready, so the first rollout spreads
		// over all of them (what `flotilla agent --git-url` records at start).
		cfg, err := clientcmd.BuildConfigFromFlags("", first.Kubeconfig())
		if err != nil {
			return err
		}
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		if err := gitsync.EnsureRootSource(wctx, dyn, repo.URL(), "main", ""); err != nil {
			return fmt.Errorf("record GitSource kube-system/root: %w", err)
		}
		step("GitSource kube-system/root follows %s (branch main)", repo.Bare)
		if err := o.installPushHook(wctx, cfg, repo.Bare); err != nil {
			return fmt.Errorf("push webhook: %w", err)
		}
		step("a git push to it notifies the site at once (hooks/post-receive -> flotilla dev notify)")
		url = "http://" + first.IP + "/"
		if err := waitApp(wctx, client, url, step); err != nil {
			return fmt.Errorf("%w (agent logs: %s/host-N.log)", err, o.Dir)
		}
	}
	ok = true
	fmt.Fprintf(o.out(), `
The site runs %d hosts in network namespaces (logs: %s/host-N.log).
  export KUBECONFIG=%s
  %s get nodes -o wide
  %s get all -A
Any host's kubeconfig works against any host: %s/host-N/kubeconfig.
Remove everything with: make demo-down   (or: flotilla dev down --dir %s)
API: https://%s:6443
`, o.Hosts, o.Dir, first.Kubeconfig(), o.Kubectl, o.Kubectl, o.Dir, o.Dir, first.IP)
	if repo != nil {
		fmt.Fprintf(o.out(), `
The site deploys %s from git (GitSource kube-system/root; a push notifies it at once):
  %s get gitsources -A
  cd %s && $EDITOR deployment.yaml && git commit -am "change" && git push
  %s -n hello rollout status deployment/hello
The application answers through the Ingress of every host:
%s
`, o.App, o.Kubectl, repo.Work, o.Kubectl, url)
	}
	return nil
}

// Down stops the hosts and removes everything Up created.
func (o *Dev) Down() error {
	// The hosts' containers outlive their agents; this binary's `reset` removes them.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	site, err := Load(o.statePath(), Options{Bin: self})
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(o.out(), "no dev site in %s\n", o.Dir)
		return nil
	}
	if err != nil {
		return err
	}
	site.Close()
	if err := os.RemoveAll(o.Dir); err != nil {
		return err
	}
	fmt.Fprintf(o.out(), "dev site in %s removed\n", o.Dir)
	return nil
}

// Start starts again the stopped hosts of the site (those named, or every one), each with
// the arguments `dev up` gave it: a host whose agent was killed or crashed comes back with
// its data.
func (o *Dev) Start(names []string) error {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	o.Dir = dir
	site, err := Load(o.statePath(), Options{Dir: o.Dir, Bin: o.Bin, Detach: true})
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no dev site in %s: run `flotilla dev up` first", o.Dir)
	}
	if err != nil {
		return err
	}
	if site.opts.Bin == "" {
		if site.opts.Bin, err = os.Executable(); err != nil {
			return err
		}
	}
	hosts := site.Hosts
	if len(names) > 0 {
		byName := map[string]*Host{}
		var known []string
		for _, h := range site.Hosts {
			byName[h.Name] = h
			known = append(known, h.Name)
		}
		hosts = nil
		for _, n := range names {
			h, ok := byName[n]
			if !ok {
				return fmt.Errorf("no host %q in the dev site (hosts: %s)", n, strings.Join(known, ", "))
			}
			hosts = append(hosts, h)
		}
	}
	started := 0
	for _, h := range hosts {
		if h.Running() {
			if len(names) > 0 {
				fmt.Fprintf(o.out(), "%s is already running (pid %d)\n", h.Name, h.PID())
			}
			continue
		}
		if len(h.args) == 0 {
			return fmt.Errorf("%s was never started: run `flotilla dev down`, then `flotilla dev up`", h.Name)
		}
		if err := h.Restart(); err != nil {
			return fmt.Errorf("start %s: %w", h.Name, err)
		}
		if err := site.Save(o.statePath()); err != nil {
			return err
		}
		fmt.Fprintf(o.out(), "%s started (pid %d); its log: %s\n", h.Name, h.PID(), h.LogFile())
		started++
	}
	if started == 0 && len(names) == 0 {
		fmt.Fprintln(o.out(), "every host is running")
	}
	return nil
}

// Status prints the hosts of the site and how many Nodes are Ready.
func (o *Dev) Status(ctx context.Context) error {
	site, err := Load(o.statePath(), Options{})
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(o.out(), "no dev site in %s\n", o.Dir)
		return nil
	}
	if err != nil {
		return err
	}
	for _, h := range site.Hosts {
		state := "stopped"
		if h.Running() {
			state = "running"
		}
		fmt.Fprintf(o.out(), "%-8s %-15s %-8s %s\n", h.Name, h.IP, state, h.Kubeconfig())
	}
	if len(site.Hosts) > 0 {
		if client, err := clientFor(site.Hosts[0].Kubeconfig()); err == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if n, err := readyNodeCount(cctx, client); err == nil {
				fmt.Fprintf(o.out(), "%d nodes Ready\n", n)
			}
		}
	}
	return nil
}

func clientFor(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return kubeclient.New(cfg)
}

func readyNodeCount(ctx context.Context, c kubernetes.Interface) (int, error) {
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, node := range nodes.Items {
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n, nil
}

// sideLoadImages copies the image tarballs of dir into a host's auto-import directory.
func sideLoadImages(dir, dest string) error {
	if dir == "" {
		return nil
	}
	tars, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return err
	}
	if len(tars) == 0 {
		return fmt.Errorf("--images %s holds no *.tar image: run hack/pack-images.sh (make demo does)", dir)
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	for _, t := range tars {
		b, err := os.ReadFile(t)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dest, filepath.Base(t)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// waitApp waits until every Deployment is available and url answers 200, printing progress.
func waitApp(ctx context.Context, client kubernetes.Interface, url string, step func(string, ...any)) error {
	last := ""
	httpc := &http.Client{Timeout: 3 * time.Second}
	for {
		msg := appProgress(ctx, client)
		if msg != last {
			step("%s", msg)
			last = msg
		}
		if strings.HasPrefix(msg, "deployments available") {
			resp, err := httpc.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					step("%s answers 200", url)
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the application did not answer at %s in time; last state: %s", url, msg)
		case <-time.After(time.Second):
		}
	}
}

// appProgress summarises the deployment's state in one line.
func appProgress(ctx context.Context, client kubernetes.Interface) string {
	deps, err := client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "waiting for the API: " + err.Error()
	}
	if len(deps.Items) == 0 {
		return "waiting for gitsync to apply the repository"
	}
	ready, want := int32(0), int32(0)
	for _, d := range deps.Items {
		if d.Spec.Replicas != nil {
			want += *d.Spec.Replicas
		}
		ready += d.Status.AvailableReplicas
	}
	if ready < want {
		pods, _ := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return fmt.Sprintf("pods: %d running, %d/%d available", running, ready, want)
	}
	return fmt.Sprintf("deployments available (%d/%d pods); waiting for the Ingress", ready, want)
}

// devWebhookSecret is the Secret (kube-system) holding the dev site's push-webhook token.
const devWebhookSecret = "git-webhook"

func (o *Dev) tokenPath() string { return filepath.Join(o.Dir, "webhook-token") }

// installPushHook makes a push to the dev site's repository deploy at once: the root
// GitSource gets a webhook secret, and the bare repository a post-receive hook that runs
// `flotilla dev notify`, which signs and sends the push event as a git server would.
func (o *Dev) installPushHook(ctx context.Context, cfg *rest.Config, bare string) error {
	token := randHex(16)
	client, err := kubeclient.New(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: devWebhookSecret, Namespace: "kube-system"},
		Data: map[string][]byte{gitsync.WebhookTokenKey: []byte(token)}}
	if _, err := client.CoreV1().Secrets("kube-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Secret kube-system/%s: %w", devWebhookSecret, err)
	}
	patch := fmt.Appendf(nil, `{"spec":{"webhookSecretRef":{"name":%q}}}`, devWebhookSecret)
	if _, err := dyn.Resource(gitsync.GitSourceResource).Namespace("kube-system").Patch(ctx, "root", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("give GitSource kube-system/root the webhook secret: %w", err)
	}
	if err := os.WriteFile(o.tokenPath(), []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	hook := fmt.Sprintf(`#!/bin/sh
# Written by 'flotilla dev up': tell the site about the push (its GitSource's push webhook),
# so that it deploys now rather than at the next poll. A failure never fails the push.
%q dev notify --dir %q >/dev/null 2>&1 || true
`, self, o.Dir)
	return os.WriteFile(filepath.Join(bare, "hooks", "post-receive"), []byte(hook), 0o755)
}

// Notify posts a signed GitHub-style push event for kube-system/root to the first host.
func (o *Dev) Notify(ctx context.Context) error {
	site, err := Load(o.statePath(), Options{})
	if err != nil {
		return fmt.Errorf("dev site in %s: %w", o.Dir, err)
	}
	if len(site.Hosts) == 0 {
		return fmt.Errorf("dev site in %s has no hosts", o.Dir)
	}
	b, err := os.ReadFile(o.tokenPath())
	if err != nil {
		return fmt.Errorf("webhook token: %w (was the site started with --app?)", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", site.Hosts[0].Kubeconfig())
	if err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return gitsync.SendPushEvent(rctx, hc, cfg.Host, "kube-system", "root", "main", []byte(strings.TrimSpace(string(b))))
}
