package api

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/test/framework"
)

func TestRestartKeepsObjectsAndShutdownIsQuick(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{})
	c := a.Client()
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := c.CoreV1().ConfigMaps("default").Get(ctx, "cm-7", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	took, err := a.Stop()
	if err != nil {
		t.Fatalf("agent exit: %v\n%s", err, a.Logs())
	}
	if took > 5*time.Second {
		t.Errorf("SIGTERM to exit took %s, want < 5s", took)
	}
	a.Restart()
	c = a.Client()
	list, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cm := range list.Items {
		if strings.HasPrefix(cm.Name, "cm-") {
			n++
		}
	}
	if n != 20 {
		t.Errorf("after restart %d of 20 configmaps", n)
	}
	after, err := c.CoreV1().ConfigMaps("default").Get(ctx, "cm-7", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID || after.ResourceVersion != before.ResourceVersion || after.Data["i"] != "7" {
		t.Errorf("cm-7 changed across restart: %v/%v -> %v/%v", before.UID, before.ResourceVersion, after.UID, after.ResourceVersion)
	}
	if _, err := c.CoreV1().Namespaces().Get(ctx, "team-a", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace lost: %v", err)
	}
}

func TestAuthentication(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	for _, tc := range []struct{ name, token string }{{"no token", ""}, {"wrong token", "not-the-token"}} {
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://127.0.0.1:%d/api/v1/namespaces", a.APIPort), nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", tc.name, resp.StatusCode)
		}
	}
	if _, err := a.Client().CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Errorf("with the admin token: %v", err)
	}
}

func TestWatchSemantics(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{})
	c := a.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("informer syncs and sees changes", func(t *testing.T) {
		factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace("default"))
		inf := factory.Core().V1().ConfigMaps().Informer()
		seen := make(chan string, 10)
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj interface{}) { seen <- obj.(*corev1.ConfigMap).Name }})
		stop := make(chan struct{})
		defer close(stop)
		factory.Start(stop)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("informer did not sync")
		}
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "informed"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case n := <-seen:
				if n == "informed" {
					return
				}
			case <-ctx.Done():
				t.Fatal("informer did not see the create")
			}
		}
	})

	t.Run("watch from a compacted resourceVersion gets 410 Expired", func(t *testing.T) {
		first, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "old"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var last string
		for i := 0; i < 5; i++ {
			cm, err := c.CoreV1().ConfigMaps("default").Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "old"}, Data: map[string]string{"n": fmt.Sprint(i)}}, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			last = cm.ResourceVersion
		}
		compactEtcd(t, a, last)
		// The watch cache of a running server may still hold the events; after a restart
		// the server's history starts at the current revision and etcd has compacted the
		// rest, so the old resourceVersion cannot be served.
		a.Restart()
		c := a.Client()
		w, err := c.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: first.ResourceVersion})
		if err == nil {
			// The server may also report it as the first event of the watch.
			ev := <-w.ResultChan()
			w.Stop()
			st, ok := ev.Object.(*metav1.Status)
			if !ok || st.Code != 410 {
				t.Fatalf("watch from compacted rv %s: first event %v %#v, want 410", first.ResourceVersion, ev.Type, ev.Object)
			}
			return
		}
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("watch from compacted rv: %v, want 410", err)
		}
	})

	t.Run("list with limit and continue", func(t *testing.T) {
		for i := 0; i < 7; i++ {
			_, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("page-%d", i)}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
		names := map[string]bool{}
		opts := metav1.ListOptions{Limit: 3}
		pages := 0
		for {
			l, err := c.CoreV1().ConfigMaps("default").List(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(l.Items) > 3 {
				t.Fatalf("page of %d items with limit 3", len(l.Items))
			}
			for _, cm := range l.Items {
				names[cm.Name] = true
			}
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
		for i := 0; i < 7; i++ {
			if !names[fmt.Sprintf("page-%d", i)] {
				t.Errorf("page-%d missing from the paged list", i)
			}
		}
		if pages < 3 {
			t.Errorf("%d pages, want at least 3", pages)
		}
	})
}

// compactEtcd compacts the agent's etcd at rev through its client port with the agent's
// client certificate.
// podEvents reads w until it delivers the deletion of the pod named name and returns that
// pod's events, each as "<type> <spec.nodeName>".
func podEvents(t *testing.T, what string, w watch.Interface, name string) []string {
	t.Helper()
	var got []string
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch %s closed after %q, before the deletion of %s", what, got, name)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				t.Fatalf("watch %s: %s event with %T, want a pod", what, ev.Type, ev.Object)
			}
			if p.Name != name {
				continue
			}
			got = append(got, fmt.Sprintf("%s %s", ev.Type, p.Spec.NodeName))
			if ev.Type == watch.Deleted {
				return got
			}
		case <-timeout:
			t.Fatalf("watch %s delivered %q in 10s, not the deletion of %s", what, got, name)
		}
	}
}

func compactEtcd(t *testing.T, a *framework.Agent, rev string) {
	t.Helper()
	cli := framework.EtcdClient(t, a)
	defer cli.Close()
	var r int64
	fmt.Sscan(rev, &r)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Compact(ctx, r, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact: %v", err)
	}
}

func TestPodsAPI(t *testing.T) {
	a := framework.StartAgent(t, framework.AgentOptions{})
	c := a.Client()
	ctx := context.Background()
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "x"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	p, err := c.CoreV1().Pods("default").Create(ctx, pod("bound"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodPending || p.Spec.SchedulerName != "default-scheduler" || p.Spec.Containers[0].ImagePullPolicy != corev1.PullAlways {
		t.Errorf("created pod: phase %q scheduler %q pullPolicy %q", p.Status.Phase, p.Spec.SchedulerName, p.Spec.Containers[0].ImagePullPolicy)
	}

	t.Run("default tolerations for not-ready and unreachable", func(t *testing.T) {
		want := map[string]bool{"node.kubernetes.io/not-ready": false, "node.kubernetes.io/unreachable": false}
		for _, tol := range p.Spec.Tolerations {
			if _, ok := want[tol.Key]; ok && tol.Effect == corev1.TaintEffectNoExecute && tol.Operator == corev1.TolerationOpExists &&
				tol.TolerationSeconds != nil && *tol.TolerationSeconds == 300 {
				want[tol.Key] = true
			}
		}
		for k, ok := range want {
			if !ok {
				t.Errorf("no %s:NoExecute toleration for 300s in %+v", k, p.Spec.Tolerations)
			}
		}
		own := pod("tolerant")
		sec := int64(5)
		own.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &sec}}
		got, err := c.CoreV1().Pods("default").Create(ctx, own, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Spec.Tolerations) != 2 || *got.Spec.Tolerations[0].TolerationSeconds != 5 {
			t.Errorf("a pod's own toleration must be kept and only the missing one added: %+v", got.Spec.Tolerations)
		}
		_ = c.CoreV1().Pods("default").Delete(ctx, "tolerant", metav1.DeleteOptions{})
	})

	t.Run("binding succeeds once", func(t *testing.T) {
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "bound"}, Target: corev1.ObjectReference{Kind: "Node", Name: "host-1"}}
		if err := c.CoreV1().Pods("default").Bind(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b.Target.Name = "host-2"
		err := c.CoreV1().Pods("default").Bind(ctx, b, metav1.CreateOptions{})
		if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `already assigned to node "host-1"`) {
			t.Errorf("second binding: %v, want 409 already assigned", err)
		}
		got, _ := c.CoreV1().Pods("default").Get(ctx, "bound", metav1.GetOptions{})
		if got.Spec.NodeName != "host-1" {
			t.Errorf("nodeName = %q", got.Spec.NodeName)
		}
	})

	t.Run("field selectors", func(t *testing.T) {
		if _, err := c.CoreV1().Pods("default").Create(ctx, pod("unbound"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		l, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", "host-1").String()})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 || l.Items[0].Name != "bound" {
			t.Errorf("spec.nodeName=host-1 -> %d pods", len(l.Items))
		}
		l, err = c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending,spec.nodeName="})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 || l.Items[0].Name != "unbound" {
			t.Errorf("unscheduled pending pods -> %v", l.Items)
		}
		_, err = c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.bogus=1"})
		if !apierrors.IsBadRequest(err) {
			t.Errorf("unknown field selector: %v, want 400", err)
		}
	})

	// The watch cache indexes pods by spec.nodeName (as kube-apiserver does): a change goes
	// to the watchers of the pod's old and new node, so a pod bound to a node must appear in
	// that node's watch and leave the watch of unscheduled pods.
	t.Run("watches by spec.nodeName follow a pod onto and off its node", func(t *testing.T) {
		l, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		watch := func(ns, selector string) watch.Interface {
			w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: l.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Stop)
			return w
		}
		onNode, unscheduled := watch("", "spec.nodeName=host-9"), watch("default", "spec.nodeName=")
		// No scheduler serves this pod: the site's own would otherwise write its PodScheduled
		// condition (an extra MODIFIED) whenever it got to the pod before the binding below.
		mover := pod("mover")
		mover.Spec.SchedulerName = "no-such-scheduler"
		if _, err := c.CoreV1().Pods("default").Create(ctx, mover, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "mover"}, Target: corev1.ObjectReference{Kind: "Node", Name: "host-9"}}
		if err := c.CoreV1().Pods("default").Bind(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Served from the watch cache's index at any resourceVersion.
		cached, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=host-9", ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(cached.Items) > 1 || (len(cached.Items) == 1 && cached.Items[0].Name != "mover") {
			t.Errorf("list of spec.nodeName=host-9 from the cache: %d pods, want at most mover", len(cached.Items))
		}
		if _, err := c.CoreV1().Pods("default").Patch(ctx, "mover", types.MergePatchType, []byte(`{"metadata":{"labels":{"moved":"yes"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		zero := int64(0)
		if err := c.CoreV1().Pods("default").Delete(ctx, "mover", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		// The node's watch sees the pod arrive with its binding, change, and go; the deletion
		// may first mark it (MODIFIED) before removing it.
		got := podEvents(t, "spec.nodeName=host-9", onNode, "mover")
		if len(got) < 3 || got[0] != "ADDED host-9" || got[1] != "MODIFIED host-9" || got[len(got)-1] != "DELETED host-9" {
			t.Errorf("watch spec.nodeName=host-9 delivered %q, want ADDED, MODIFIED (the label), then DELETED, all on host-9", got)
		}
		// The unscheduled pods' watch sees it created, and deleted when it is bound.
		if got := podEvents(t, "spec.nodeName=", unscheduled, "mover"); !slices.Equal(got, []string{"ADDED ", "DELETED "}) {
			t.Errorf("watch spec.nodeName= delivered %q, want ADDED then DELETED with no node", got)
		}
	})

	t.Run("graceful deletion waits for the node agent", func(t *testing.T) {
		if err := c.CoreV1().Pods("default").Delete(ctx, "bound", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := c.CoreV1().Pods("default").Get(ctx, "bound", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("bound pod vanished at once: %v", err)
		}
		if got.DeletionTimestamp == nil || got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != 30 {
			t.Errorf("deletionTimestamp %v grace %v, want set and 30", got.DeletionTimestamp, got.DeletionGracePeriodSeconds)
		}
		zero := int64(0)
		if err := c.CoreV1().Pods("default").Delete(ctx, "bound", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Pods("default").Get(ctx, "bound", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after the confirming delete: %v", err)
		}
		if err := c.CoreV1().Pods("default").Delete(ctx, "unbound", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Pods("default").Get(ctx, "unbound", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("an unscheduled pod is deleted at once, got %v", err)
		}
	})

	t.Run("namespace lifecycle", func(t *testing.T) {
		_, err := c.CoreV1().Pods("nowhere").Create(ctx, pod("p"), metav1.CreateOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("create in a missing namespace: %v, want 404", err)
		}
		err = c.CoreV1().Namespaces().Delete(ctx, "kube-system", metav1.DeleteOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("delete kube-system: %v, want 403", err)
		}
	})
}
