package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/test/e2e/harness"
)

type devOptions struct {
	dir     string
	hosts   int
	bin     string
	kubectl string
	images  string
	app     string
}

func newDevCommand() *cobra.Command {
	o := &devOptions{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "A site of several hosts on this machine (network namespaces), for trying flotilla out; needs root",
	}
	cmd.PersistentFlags().StringVar(&o.dir, "dir", "demo", "directory for the hosts' data, logs and the site's state")
	up := &cobra.Command{
		Use:   "up",
		Short: "Create the hosts and start a flotilla agent on each; print how to reach the site",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return devUp(cmd.Context(), o) },
	}
	up.Flags().IntVar(&o.hosts, "hosts", 3, "how many hosts")
	up.Flags().StringVar(&o.bin, "flotilla", "", "the flotilla binary the hosts run (default: this one)")
	up.Flags().StringVar(&o.kubectl, "kubectl", "kubectl", "kubectl to show in the instructions")
	up.Flags().StringVar(&o.images, "images", "", "directory of OCI image tarballs (*.tar) side-loaded into every host")
	up.Flags().StringVar(&o.app, "app", "", "directory committed to a local git repository that the site deploys from (e.g. examples/hello)")
	down := &cobra.Command{
		Use: "down", Short: "Stop the hosts and remove everything `dev up` created", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return devDown(o) },
	}
	status := &cobra.Command{
		Use: "status", Short: "Show the hosts of the dev site", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return devStatus(cmd.Context(), o) },
	}
	cmd.AddCommand(up, down, status, newDevNotifyCommand(o))
	return cmd
}

func (o *devOptions) statePath() string { return filepath.Join(o.dir, "site.json") }

func devUp(ctx context.Context, o *devOptions) error {
	if o.hosts < 1 || o.hosts > 9 {
		return fmt.Errorf("--hosts %d: use 1 to 9", o.hosts)
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	o.dir = dir
	if _, err := os.Stat(o.statePath()); err == nil {
		fmt.Printf("a dev site already exists in %s:\n", o.dir)
		if err := devStatus(ctx, o); err != nil {
			return err
		}
		return errors.New("run `flotilla dev down` (or `make demo-down`) first to start a new one")
	}
	if o.bin == "" {
		if o.bin, err = os.Executable(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	site, err := harness.New(harness.Options{Hosts: o.hosts, Dir: o.dir, Bin: o.bin, Kubectl: o.kubectl, Detach: true})
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
		fmt.Printf("[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	for _, h := range site.Hosts {
		if err := sideLoadImages(o.images, filepath.Join(h.DataDir, "images")); err != nil {
			return err
		}
	}
	var repo *harness.GitRepo
	if o.app != "" {
		if repo, err = harness.NewGitRepo(o.dir, o.app); err != nil {
			return err
		}
		step("committed %s to %s (clone to edit: %s)", o.app, repo.Bare, repo.Work)
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
		if err == nil && n == o.hosts {
			break
		}
		if wctx.Err() != nil {
			return fmt.Errorf("only %d of %d nodes Ready: %v", n, o.hosts, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	step("%d hosts Ready", o.hosts)
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
		if err := installPushHook(wctx, cfg, o, repo.Bare); err != nil {
			return fmt.Errorf("push webhook: %w", err)
		}
		step("a git push to it notifies the site at once (hooks/post-receive -> flotilla dev notify)")
		url = "http://" + first.IP + "/"
		if err := waitApp(wctx, client, url, step); err != nil {
			return fmt.Errorf("%w (agent logs: %s/host-N.log)", err, o.dir)
		}
	}
	ok = true
	fmt.Printf(`
The site runs %d hosts in network namespaces (logs: %s/host-N.log).
  export KUBECONFIG=%s
  %s get nodes -o wide
  %s get all -A
Any host's kubeconfig works against any host: %s/host-N/kubeconfig.
Remove everything with: make demo-down   (or: flotilla dev down --dir %s)
API: https://%s:6443
`, o.hosts, o.dir, first.Kubeconfig(), o.kubectl, o.kubectl, o.dir, o.dir, first.IP)
	if repo != nil {
		fmt.Printf(`
The site deploys %s from git (GitSource kube-system/root; a push notifies it at once):
  %s get gitsources -A
  cd %s && $EDITOR deployment.yaml && git commit -am "change" && git push
  %s -n hello rollout status deployment/hello
The application answers through the Ingress of every host:
%s
`, o.app, o.kubectl, repo.Work, o.kubectl, url)
	}
	return nil
}

func devDown(o *devOptions) error {
	// The hosts' containers outlive their agents; this binary's `reset` removes them.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	site, err := harness.Load(o.statePath(), harness.Options{Bin: self})
	if errors.Is(err, os.ErrNotExist) {
		fmt.Printf("no dev site in %s\n", o.dir)
		return nil
	}
	if err != nil {
		return err
	}
	site.Close()
	if err := os.RemoveAll(o.dir); err != nil {
		return err
	}
	fmt.Printf("dev site in %s removed\n", o.dir)
	return nil
}

func devStatus(ctx context.Context, o *devOptions) error {
	site, err := harness.Load(o.statePath(), harness.Options{})
	if errors.Is(err, os.ErrNotExist) {
		fmt.Printf("no dev site in %s\n", o.dir)
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
		fmt.Printf("%-8s %-15s %-8s %s\n", h.Name, h.IP, state, h.Kubeconfig())
	}
	if len(site.Hosts) > 0 {
		if client, err := clientFor(site.Hosts[0].Kubeconfig()); err == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if n, err := readyNodeCount(cctx, client); err == nil {
				fmt.Printf("%d nodes Ready\n", n)
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
	return kubernetes.NewForConfig(cfg)
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
