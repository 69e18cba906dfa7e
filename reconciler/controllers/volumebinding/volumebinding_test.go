package volumebinding_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumeprotection"
	"github.com/flotilla-dev/flotilla/test/controllertest"
)

const wait = 30 * time.Second

// Every scenario uses its own storage class (or selector), so the cluster-wide volumes of one
// cannot satisfy the claims of another.

func localPV(name, size, class, host string, reclaim corev1.PersistentVolumeReclaimPolicy, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: reclaim,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/srv/volumes/" + name}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{host}}},
			}}}},
		},
	}
	for _, m := range mods {
		m(pv)
	}
	return pv
}

func hostPathPV(name, size, class string, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	pv := localPV(name, size, class, "edge-a", corev1.PersistentVolumeReclaimRetain, mods...)
	pv.Spec.Local = nil
	pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/srv/hostpath/" + name}
	return pv
}

func claim(name, size, class string, mods ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	if class != "" {
		pvc.Spec.StorageClassName = &class
	}
	for _, m := range mods {
		m(pvc)
	}
	return pvc
}

type env struct {
	t      *testing.T
	client kubernetes.Interface
	ns     string
}

func (e env) createPV(pvs ...*corev1.PersistentVolume) {
	e.t.Helper()
	for _, pv := range pvs {
		if _, err := e.client.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("create pv %s: %v", pv.Name, err)
		}
	}
	// Claims created later must see every volume as a candidate: the controller binds to the
	// best volume it knows of at that moment, as upstream does.
	for _, pv := range pvs {
		controllertest.Eventually(e.t, wait, "volume "+pv.Name+" Available", func() (bool, error) {
			return e.pv(pv.Name).Status.Phase == corev1.VolumeAvailable, nil
		})
	}
}

func (e env) createPVC(pvcs ...*corev1.PersistentVolumeClaim) {
	e.t.Helper()
	for _, pvc := range pvcs {
		if _, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("create pvc %s: %v", pvc.Name, err)
		}
	}
}

func (e env) pvc(name string) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	pvc, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get pvc %s: %v", name, err)
	}
	return pvc
}

func (e env) pv(name string) *corev1.PersistentVolume {
	e.t.Helper()
	pv, err := e.client.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get pv %s: %v", name, err)
	}
	return pv
}

// waitBound waits until claim and volume are Bound to each other, then checks the fields
// and annotations of the binding.
func (e env) waitBound(claimName, volumeName string) {
	e.t.Helper()
	controllertest.Eventually(e.t, wait, "claim "+claimName+" Bound to "+volumeName, func() (bool, error) {
		pvc, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Get(context.Background(), claimName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pv, err := e.client.CoreV1().PersistentVolumes().Get(context.Background(), volumeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pvc.Status.Phase == corev1.ClaimBound && pv.Status.Phase == corev1.VolumeBound, nil
	})
	pvc, pv := e.pvc(claimName), e.pv(volumeName)
	if pvc.Spec.VolumeName != volumeName {
		e.t.Errorf("claim %s: spec.volumeName = %q, want %q", claimName, pvc.Spec.VolumeName, volumeName)
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace != e.ns || ref.Name != claimName || ref.UID != pvc.UID || ref.Kind != "PersistentVolumeClaim" ||
		ref.APIVersion != "v1" || ref.ResourceVersion == "" {
		e.t.Errorf("volume %s: claimRef = %+v, want the full reference of %s/%s (uid %s)", volumeName, ref, e.ns, claimName, pvc.UID)
	}
	if _, ok := pvc.Annotations[volumebinding.AnnBindCompleted]; !ok {
		e.t.Errorf("claim %s: annotations %v lack %s", claimName, pvc.Annotations, volumebinding.AnnBindCompleted)
	}
	got, want := pvc.Status.Capacity[corev1.ResourceStorage], pv.Spec.Capacity[corev1.ResourceStorage]
	if got.Cmp(want) != 0 || len(pvc.Status.AccessModes) != len(pv.Spec.AccessModes) {
		e.t.Errorf("claim %s: status capacity %s modes %v, want the volume's %s %v", claimName, got.String(), pvc.Status.AccessModes,
			want.String(), pv.Spec.AccessModes)
	}
}

func (e env) expectPending(names ...string) {
	e.t.Helper()
	for _, n := range names {
		pvc := e.pvc(n)
		if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" {
			e.t.Errorf("claim %s: phase %s volumeName %q, want Pending and unbound", n, pvc.Status.Phase, pvc.Spec.VolumeName)
		}
	}
}

func (e env) waitEvent(claimName, reason, message string) {
	e.t.Helper()
	controllertest.Eventually(e.t, wait, "event "+reason+" on claim "+claimName, func() (bool, error) {
		list, err := e.client.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", claimName).String()})
		if err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.Reason == reason && ev.Message == message && ev.Source.Component == volumebinding.Component {
				return true, nil
			}
		}
		return false, nil
	})
}

func TestVolumeBinding(t *testing.T) {
	// volumeprotection releases the deleted claims (each carries the in-use finalizer).
	a, client := controllertest.Start(t, volumebinding.New, volumeprotection.New)
	ctx := context.Background()
	for _, n := range []struct{ name, zone string }{{"edge-a", "north"}, {"edge-b", "south"}} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{
			corev1.LabelHostname: n.name, corev1.LabelTopologyZone: n.zone}}}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create node %s: %v", n.name, err)
		}
	}
	newEnv := func(t *testing.T, ns string) env {
		controllertest.Namespace(t, client, ns)
		return env{t: t, client: client, ns: ns}
	}

	t.Run("smallest matching volume, shown by kubectl", func(t *testing.T) {
		e := newEnv(t, "smallest")
		e.createPV(localPV("sm-5g", "5Gi", "sm", "edge-a", corev1.PersistentVolumeReclaimRetain),
			localPV("sm-1g", "1Gi", "sm", "edge-a", corev1.PersistentVolumeReclaimRetain),
			hostPathPV("sm-2g", "2Gi", "sm"),
			localPV("sm-3g", "3Gi", "sm", "edge-b", corev1.PersistentVolumeReclaimRetain))
		e.createPVC(claim("data", "1500Mi", "sm"))
		e.waitBound("data", "sm-2g")
		if _, ok := e.pv("sm-2g").Annotations[volumebinding.AnnBoundByController]; !ok {
			t.Errorf("volume sm-2g lacks %s", volumebinding.AnnBoundByController)
		}
		if _, ok := e.pvc("data").Annotations[volumebinding.AnnBoundByController]; !ok {
			t.Errorf("claim data lacks %s", volumebinding.AnnBoundByController)
		}
		for _, name := range []string{"sm-5g", "sm-1g", "sm-3g"} {
			if pv := e.pv(name); pv.Status.Phase != corev1.VolumeAvailable || pv.Spec.ClaimRef != nil {
				t.Errorf("volume %s: phase %s claimRef %+v, want Available and unclaimed", name, pv.Status.Phase, pv.Spec.ClaimRef)
			}
		}
		pvLine := a.MustKubectl("", "get", "pv", "sm-2g", "--no-headers")
		if f := strings.Fields(pvLine); len(f) < 6 || f[1] != "2Gi" || f[2] != "RWO" || f[3] != "Retain" || f[4] != "Bound" || f[5] != "smallest/data" {
			t.Errorf("kubectl get pv sm-2g = %q, want 2Gi RWO Retain Bound smallest/data", pvLine)
		}
		pvcLine := a.MustKubectl("", "get", "pvc", "data", "-n", "smallest", "--no-headers")
		if f := strings.Fields(pvcLine); len(f) < 6 || f[1] != "Bound" || f[2] != "sm-2g" || f[3] != "2Gi" || f[4] != "RWO" || f[5] != "sm" {
			t.Errorf("kubectl get pvc data = %q, want Bound sm-2g 2Gi RWO sm", pvcLine)
		}
		both := a.MustKubectl("", "get", "pv,pvc", "-n", "smallest")
		if !strings.Contains(both, "CLAIM") || !strings.Contains(both, "persistentvolumeclaim/data") {
			t.Errorf("kubectl get pv,pvc:\n%s\nwant the CLAIM column and the claim", both)
		}
	})

	t.Run("mismatches stay Pending", func(t *testing.T) {
		e := newEnv(t, "mismatch")
		e.createPV(localPV("mm-rwo", "10Gi", "mm", "edge-a", corev1.PersistentVolumeReclaimRetain,
			func(pv *corev1.PersistentVolume) { pv.Labels = map[string]string{"tier": "silver"} }))
		e.createPVC(
			claim("rwx", "1Gi", "mm", func(c *corev1.PersistentVolumeClaim) {
				c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
			}),
			claim("other-class", "1Gi", "mm-other"),
			claim("gold", "1Gi", "mm", func(c *corev1.PersistentVolumeClaim) {
				c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
			}),
			claim("huge", "20Gi", "mm"),
			claim("no-class", "1Gi", ""),
		)
		e.waitEvent("no-class", "FailedBinding", "no persistent volumes available for this claim and no storage class is set")
		// A claim that fits binds; the others, synced on the same volume events, must not.
		e.createPVC(claim("fits", "1Gi", "mm", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "silver"}}
		}))
		e.waitBound("fits", "mm-rwo")
		// Another volume event retries every Pending claim; still nothing fits them.
		e.createPV(localPV("mm-silver-small", "1Gi", "mm", "edge-a", corev1.PersistentVolumeReclaimRetain,
			func(pv *corev1.PersistentVolume) { pv.Labels = map[string]string{"tier": "silver"} }))
		e.expectPending("rwx", "other-class", "gold", "huge", "no-class")
	})

	t.Run("volumeName and claimRef pre-binding", func(t *testing.T) {
		e := newEnv(t, "prebound")
		e.createPV(localPV("pb-small", "1Gi", "pb", "edge-a", corev1.PersistentVolumeReclaimRetain),
			localPV("pb-big", "8Gi", "pb", "edge-a", corev1.PersistentVolumeReclaimRetain),
			localPV("pb-reserved", "4Gi", "pb", "edge-b", corev1.PersistentVolumeReclaimRetain, func(pv *corev1.PersistentVolume) {
				pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "prebound", Name: "reserved"}
			}))
		e.createPVC(claim("named", "1Gi", "pb", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pb-big" }))
		e.waitBound("named", "pb-big")
		if _, ok := e.pvc("named").Annotations[volumebinding.AnnBoundByController]; ok {
			t.Errorf("claim named was bound by hand (volumeName) but carries %s", volumebinding.AnnBoundByController)
		}
		e.createPVC(claim("reserved", "1Gi", "pb"))
		e.waitBound("reserved", "pb-reserved")
		if _, ok := e.pv("pb-reserved").Annotations[volumebinding.AnnBoundByController]; ok {
			t.Errorf("volume pb-reserved was pre-bound by hand but carries %s", volumebinding.AnnBoundByController)
		}
		if e.pv("pb-small").Spec.ClaimRef != nil {
			t.Errorf("pb-small got claimed: %+v", e.pv("pb-small").Spec.ClaimRef)
		}
	})

	t.Run("WaitForFirstConsumer binds on the selected node", func(t *testing.T) {
		e := newEnv(t, "wffc")
		e.createPV(localPV("wf-a", "1Gi", volumebinding.LocalClass, "edge-a", corev1.PersistentVolumeReclaimDelete),
			localPV("wf-b", "2Gi", volumebinding.LocalClass, "edge-b", corev1.PersistentVolumeReclaimDelete))
		e.createPVC(claim("cache", "1Gi", volumebinding.LocalClass))
		e.waitEvent("cache", "WaitForFirstConsumer", "waiting for first consumer to be created before binding")
		e.expectPending("cache")
		pvc := e.pvc("cache")
		pvc.Annotations = map[string]string{volumebinding.AnnSelectedNode: "edge-b"}
		if _, err := client.CoreV1().PersistentVolumeClaims(e.ns).Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitBound("cache", "wf-b") // wf-a is smaller but lives on edge-a
		if e.pv("wf-a").Spec.ClaimRef != nil {
			t.Errorf("wf-a got claimed: %+v", e.pv("wf-a").Spec.ClaimRef)
		}
	})

	t.Run("claim deleted: Retain releases, Delete deletes", func(t *testing.T) {
		e := newEnv(t, "reclaim")
		e.createPV(localPV("rc-retain", "1Gi", "rc", "edge-a", corev1.PersistentVolumeReclaimRetain,
			func(pv *corev1.PersistentVolume) { pv.Labels = map[string]string{"policy": "retain"} }),
			localPV("rc-delete", "1Gi", "rc", "edge-a", corev1.PersistentVolumeReclaimDelete,
				func(pv *corev1.PersistentVolume) { pv.Labels = map[string]string{"policy": "delete"} }))
		for _, p := range []string{"retain", "delete"} {
			e.createPVC(claim(p, "1Gi", "rc", func(c *corev1.PersistentVolumeClaim) {
				c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"policy": p}}
			}))
			e.waitBound(p, "rc-"+p)
			if err := client.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		controllertest.Eventually(t, wait, "rc-retain Released", func() (bool, error) {
			return e.pv("rc-retain").Status.Phase == corev1.VolumeReleased, nil
		})
		controllertest.Eventually(t, wait, "rc-delete deleted", func() (bool, error) {
			_, err := client.CoreV1().PersistentVolumes().Get(ctx, "rc-delete", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		// A Released volume is not handed to a new claim of the same name.
		e.createPVC(claim("retain", "1Gi", "rc", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"policy": "retain"}}
		}))
		e.waitEvent("retain", "ProvisioningFailed", `storageclass.storage.k8s.io "rc" not found`)
		e.expectPending("retain")
		if line := a.MustKubectl("", "get", "pv", "rc-retain", "--no-headers"); !strings.Contains(line, "Released") || !strings.Contains(line, "reclaim/retain") {
			t.Errorf("kubectl get pv rc-retain = %q, want Released with claim reclaim/retain", line)
		}
	})

	t.Run("a volume deleted while Bound goes once its claim does", func(t *testing.T) {
		e := newEnv(t, "protect")
		e.createPV(localPV("pr-held", "1Gi", "pr", "edge-a", corev1.PersistentVolumeReclaimRetain),
			localPV("pr-free", "1Gi", "pr-free", "edge-a", corev1.PersistentVolumeReclaimRetain))
		e.createPVC(claim("held", "1Gi", "pr"))
		e.waitBound("held", "pr-held")
		for _, pv := range []string{"pr-held", "pr-free"} {
			if err := client.CoreV1().PersistentVolumes().Delete(ctx, pv, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// Once the Available one is gone, volumeprotection has seen the Bound one too.
		controllertest.Eventually(t, wait, "the Available volume pr-free gone", func() (bool, error) {
			_, err := client.CoreV1().PersistentVolumes().Get(ctx, "pr-free", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if pv := e.pv("pr-held"); pv.DeletionTimestamp == nil || pv.Status.Phase != corev1.VolumeBound ||
			!slices.Contains(pv.Finalizers, volumeprotection.VolumeFinalizer) {
			t.Fatalf("pr-held, deleted while Bound: deleted %v phase %s finalizers %v, want it held Bound", pv.DeletionTimestamp, pv.Status.Phase, pv.Finalizers)
		}
		if err := client.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		controllertest.Eventually(t, wait, "pr-held Released and gone", func() (bool, error) {
			_, err := client.CoreV1().PersistentVolumes().Get(ctx, "pr-held", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})

	t.Run("StatefulSet claim www-web-0", func(t *testing.T) {
		e := newEnv(t, "sts")
		e.createPV(localPV("www-0", "1Gi", "sts-local", "edge-a", corev1.PersistentVolumeReclaimRetain))
		e.createPVC(claim("www-web-0", "1Gi", "sts-local", func(c *corev1.PersistentVolumeClaim) {
			c.Labels = map[string]string{"app": "nginx"}
		}))
		e.waitBound("www-web-0", "www-0")
	})
}
