package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla-dev/flotilla/test/e2e/harness"
)

type devOptions struct {
	dir     string
	hosts   int
	bin     string
	kubectl string
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
	down := &cobra.Command{
		Use: "down", Short: "Stop the hosts and remove everything `dev up` created", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return devDown(o) },
	}
	status := &cobra.Command{
		Use: "status", Short: "Show the hosts of the dev site", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return devStatus(cmd.Context(), o) },
	}
	cmd.AddCommand(up, down, status)
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
	ok = true
	fmt.Printf(`
The site runs %d hosts in network namespaces (logs: %s/host-N.log).
  export KUBECONFIG=%s
  %s get nodes -o wide
  %s get all -A
Any host's kubeconfig works against any host: %s/host-N/kubeconfig.
Not done yet (later issues): gitsync from a git repo, scheduler, containers, Service IPs on
the hosts, DNS and ingress, so no application URL answers yet.
Remove everything with: make demo-down   (or: flotilla dev down --dir %s)
API: https://%s:6443
`, o.hosts, o.dir, first.Kubeconfig(), o.kubectl, o.kubectl, o.dir, o.dir, first.IP)
	return nil
}

func devDown(o *devOptions) error {
	site, err := harness.Load(o.statePath(), harness.Options{})
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
