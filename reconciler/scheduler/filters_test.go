package scheduler

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestFilters(t *testing.T) {
	zone := corev1.LabelTopologyZone
	cases := []struct {
		name  string
		pod   *corev1.Pod
		nodes []*NodeInfo
		on    string
		want  *Status
	}{
		// NodeUnschedulable (cordon stops new pods).
		{"cordoned node", pod("p", 0, 0), []*NodeInfo{info(node("n1", 1000, 1024, 110, func(n *corev1.Node) { n.Spec.Unschedulable = true }))},
			"n1", unresolvable(reasonUnschedulable)},
		{"cordoned node tolerated (DaemonSet)", pod("p", 0, 0, tolerate(taintUnschedulable, "", corev1.TaintEffectNoSchedule)),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110, func(n *corev1.Node) { n.Spec.Unschedulable = true }))}, "n1", nil},
		// NodeName.
		{"node name differs", pod("p", 0, 0, onNode("n2")), []*NodeInfo{info(node("n1", 1000, 1024, 110))}, "n1", unresolvable(reasonNodeName)},
		// TaintToleration (the control-plane taint keeps pods off).
		{"untolerated NoSchedule taint", pod("p", 0, 0),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110, withTaint("node-role.kubernetes.io/control-plane", "", corev1.TaintEffectNoSchedule)))},
			"n1", unresolvable("node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }")},
		{"untolerated NoExecute taint with value", pod("p", 0, 0),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110, withTaint("dedicated", "gpu", corev1.TaintEffectNoExecute)))},
			"n1", unresolvable("node(s) had untolerated taint {dedicated: gpu}")},
		{"tolerated taint", pod("p", 0, 0, tolerate("dedicated", "gpu", corev1.TaintEffectNoSchedule)),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110, withTaint("dedicated", "gpu", corev1.TaintEffectNoSchedule)))}, "n1", nil},
		{"toleration for another value", pod("p", 0, 0, tolerate("dedicated", "db", corev1.TaintEffectNoSchedule)),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110, withTaint("dedicated", "gpu", corev1.TaintEffectNoSchedule)))},
			"n1", unresolvable("node(s) had untolerated taint {dedicated: gpu}")},
		{"PreferNoSchedule never filters", pod("p", 0, 0),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110, withTaint("soft", "x", corev1.TaintEffectPreferNoSchedule)))}, "n1", nil},
		// NodeSelector and required node affinity (a DaemonSet on gpu=true nodes).
		{"nodeSelector matches", pod("p", 0, 0, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"gpu": "true"} }),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110, withLabels("gpu", "true")))}, "n1", nil},
		{"nodeSelector does not match", pod("p", 0, 0, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"gpu": "true"} }),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110))}, "n1", unresolvable(reasonNodeAffinity)},
		{"required node affinity NotIn", pod("p", 0, 0, requireNode(corev1.NodeSelectorRequirement{Key: zone, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a"}})),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110, withLabels(zone, "a")))}, "n1", unresolvable(reasonNodeAffinity)},
		// NodeDeclaredFeatures (a pod that needs RestartAllContainers, a node that declares it or not).
		{"pod needs RestartAllContainers, node lacks it", pod("p", 0, 0, restartAll), []*NodeInfo{info(node("n1", 1000, 1024, 110))},
			"n1", unresolvable("node(s) didn't declare required features: RestartAllContainersOnContainerExits")},
		{"pod needs RestartAllContainers, node declares it", pod("p", 0, 0, restartAll),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110, func(n *corev1.Node) {
				n.Status.DeclaredFeatures = []string{"RestartAllContainersOnContainerExits"}
			}))}, "n1", nil},
		// NodePorts (a DaemonSet's hostPort is taken once per host IP).
		{"host port in use", pod("p", 0, 0, hostPortOn("", 9100)), []*NodeInfo{info(node("n1", 1000, 1024, 110), pod("old", 0, 0, hostPortOn("", 9100)))},
			"n1", unschedulable(reasonPorts)},
		{"host port on another IP is free", pod("p", 0, 0, hostPortOn("10.213.0.2", 9100)),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110), pod("old", 0, 0, hostPortOn("10.213.0.1", 9100)))}, "n1", nil},
		{"host port on one IP vs every IP", pod("p", 0, 0, hostPortOn("10.213.0.2", 9100)),
			[]*NodeInfo{info(node("n1", 1000, 1024, 110), pod("old", 0, 0, hostPortOn("", 9100)))}, "n1", unschedulable(reasonPorts)},
		// NodeResourcesFit (requests never exceed allocatable).
		{"fits exactly", pod("p", 500, 512), []*NodeInfo{info(node("n1", 1000, 1024, 110), pod("old", 500, 512))}, "n1", nil},
		{"insufficient cpu and memory", pod("p", 600, 600), []*NodeInfo{info(node("n1", 1000, 1024, 110), pod("old", 500, 512))},
			"n1", unschedulable("Insufficient cpu", "Insufficient memory")},
		{"too many pods", pod("p", 0, 0), []*NodeInfo{info(node("n1", 1000, 1024, 1), pod("old", 0, 0))}, "n1", unschedulable(reasonTooManyPods)},
		{"init container max rule: big init fits alone", pod("p", 100, 0, initContainer(900)), []*NodeInfo{info(node("n1", 1000, 1024, 110))}, "n1", nil},
		{"init container max rule: big init does not fit", pod("p", 100, 0, initContainer(1001)), []*NodeInfo{info(node("n1", 1000, 1024, 110))},
			"n1", unschedulable("Insufficient cpu")},
		{"overhead counts", pod("p", 900, 0, func(p *corev1.Pod) {
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}
		}), []*NodeInfo{info(node("n1", 1000, 1024, 110))}, "n1", unschedulable("Insufficient cpu")},
		{"extended resource", pod("p", 0, 0, func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests["example.com/gpu"] = resource.MustParse("1")
		}), []*NodeInfo{info(node("n1", 1000, 1024, 110))}, "n1", unschedulable("Insufficient example.com/gpu")},
		{"ephemeral storage", pod("p", 0, 0, func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse("11Gi")
		}), []*NodeInfo{info(node("n1", 1000, 1024, 110))}, "n1", unschedulable("Insufficient ephemeral-storage")},
		// Filters stop at the first failure: a tainted full node reports the taint only.
		{"first failing filter wins", pod("p", 5000, 0), []*NodeInfo{info(node("n1", 1000, 1024, 110, withTaint("k", "v", corev1.TaintEffectNoSchedule)))},
			"n1", unresolvable("node(s) had untolerated taint {k: v}")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := reasonsOf(tc.pod, NewSnapshot(tc.nodes...), tc.on)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func requireNode(reqs ...corev1.NodeSelectorRequirement) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: reqs}}},
		}}
	}
}

// restartAll adds restartPolicyRules with action RestartAllContainers to the pod.
func restartAll(p *corev1.Pod) {
	never := corev1.ContainerRestartPolicyNever
	p.Spec.Containers[0].RestartPolicy = &never
	p.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{
		Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
}

func hostPortOn(ip string, port int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port, HostIP: ip})
	}
}

func initContainer(milliCPU int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "init", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(milliCPU, resource.DecimalSI)}}})
	}
}

func spreadBy(key string, maxSkew int32, when corev1.UnsatisfiableConstraintAction, sel map[string]string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: maxSkew, TopologyKey: key, WhenUnsatisfiable: when, LabelSelector: &metav1.LabelSelector{MatchLabels: sel},
		})
	}
}

func TestTopologySpreadFilter(t *testing.T) {
	zone := corev1.LabelTopologyZone
	app := map[string]string{"app": "web"}
	mk := func() []*NodeInfo {
		return []*NodeInfo{
			info(node("a1", 4000, 4096, 110, withLabels(zone, "a")), pod("x1", 0, 0, podLabels("app", "web")), pod("x2", 0, 0, podLabels("app", "web"))),
			info(node("b1", 4000, 4096, 110, withLabels(zone, "b")), pod("x3", 0, 0, podLabels("app", "web"))),
			info(node("c1", 4000, 4096, 110, withLabels(zone, "c")), pod("other", 0, 0, podLabels("app", "db"))),
			info(node("nolabel", 4000, 4096, 110)),
		}
	}
	p := pod("new", 0, 0, podLabels("app", "web"), spreadBy(zone, 1, corev1.DoNotSchedule, app))
	cases := []struct {
		on   string
		want *Status
	}{
		{"a1", unschedulable(reasonSpread)}, // 2 + self 1 - min 0 = 3 > 1
		{"b1", unschedulable(reasonSpread)}, // 1 + 1 - 0 = 2 > 1
		{"c1", nil},                         // 0 + 1 - 0 = 1
		{"nolabel", unresolvable(reasonSpreadMissingLabel)},
	}
	snap := NewSnapshot(mk()...)
	for _, tc := range cases {
		if got := reasonsOf(p, snap, tc.on); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.on, got, tc.want)
		}
	}
	// maxSkew 2 lets b1 in, never a1.
	p2 := pod("new2", 0, 0, podLabels("app", "web"), spreadBy(zone, 2, corev1.DoNotSchedule, app))
	if got := reasonsOf(p2, snap, "b1"); got != nil {
		t.Errorf("maxSkew 2 on b1: %+v", got)
	}
	if got := reasonsOf(p2, snap, "a1"); !reflect.DeepEqual(got, unschedulable(reasonSpread)) {
		t.Errorf("maxSkew 2 on a1: %+v", got)
	}
	// ScheduleAnyway never filters.
	p3 := pod("new3", 0, 0, podLabels("app", "web"), spreadBy(zone, 1, corev1.ScheduleAnyway, app))
	if got := reasonsOf(p3, snap, "a1"); got != nil {
		t.Errorf("ScheduleAnyway filtered: %+v", got)
	}
	// minDomains above the number of domains makes the global minimum 0.
	p4 := pod("new4", 0, 0, podLabels("app", "web"), spreadBy(zone, 1, corev1.DoNotSchedule, app), func(p *corev1.Pod) {
		md := int32(5)
		p.Spec.TopologySpreadConstraints[0].MinDomains = &md
	})
	snap2 := NewSnapshot(info(node("a1", 1, 1, 110, withLabels(zone, "a")), pod("y", 0, 0, podLabels("app", "web"))),
		info(node("b1", 1, 1, 110, withLabels(zone, "b")), pod("z", 0, 0, podLabels("app", "web"))))
	if got := reasonsOf(p4, snap2, "a1"); !reflect.DeepEqual(got, unschedulable(reasonSpread)) {
		t.Errorf("minDomains: %+v", got)
	}
}

func antiAffinity(key string, sel map[string]string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: sel},
		}}}
	}
}

func affinity(key string, sel map[string]string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: sel},
		}}}
	}
}

func TestInterPodAffinityFilter(t *testing.T) {
	zone, host := corev1.LabelTopologyZone, corev1.LabelHostname
	web, cache := map[string]string{"app": "web"}, map[string]string{"app": "cache"}
	snap := NewSnapshot(
		info(node("a1", 1000, 1024, 110, withLabels(zone, "a")), pod("cache-0", 0, 0, podLabels("app", "cache"))),
		info(node("a2", 1000, 1024, 110, withLabels(zone, "a"))),
		info(node("b1", 1000, 1024, 110, withLabels(zone, "b")), pod("guard", 0, 0, podLabels("app", "guard"), antiAffinity(zone, web))),
		info(node("c1", 1000, 1024, 110, withLabels(zone, "c"))),
	)
	cases := []struct {
		name string
		pod  *corev1.Pod
		on   string
		want *Status
	}{
		{"affinity to cache's zone", pod("w", 0, 0, affinity(zone, cache)), "a2", nil},
		{"affinity: no cache in zone c", pod("w", 0, 0, affinity(zone, cache)), "c1", unresolvable(reasonAffinity)},
		{"affinity: first of a group selecting itself", pod("w", 0, 0, podLabels("app", "new"), affinity(zone, map[string]string{"app": "new"})), "c1", nil},
		{"anti-affinity per host: cache on a1", pod("w", 0, 0, antiAffinity(host, cache)), "a1", unschedulable(reasonAntiAffinity)},
		{"anti-affinity per host: a2 free", pod("w", 0, 0, antiAffinity(host, cache)), "a2", nil},
		{"anti-affinity per zone: a2 shares the zone", pod("w", 0, 0, antiAffinity(zone, cache)), "a2", unschedulable(reasonAntiAffinity)},
		{"existing pod's anti-affinity", pod("w", 0, 0, podLabels("app", "web")), "b1", unschedulable(reasonExistingAntiAffinty)},
		{"existing pod's anti-affinity, other pod", pod("w", 0, 0, podLabels("app", "db")), "b1", nil},
		{"other namespace is not selected", pod("w", 0, 0, affinity(zone, cache), func(p *corev1.Pod) { p.Namespace = "other" }), "a2", unresolvable(reasonAffinity)},
		{"empty namespaceSelector selects all", pod("w", 0, 0, affinity(zone, cache), func(p *corev1.Pod) {
			p.Namespace = "other"
			p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].NamespaceSelector = &metav1.LabelSelector{}
		}), "a2", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := reasonsOf(tc.pod, snap, tc.on); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// fakeVolumes serves claims and volumes from maps.
type fakeVolumes struct {
	claims  map[string]*corev1.PersistentVolumeClaim
	volumes []*corev1.PersistentVolume
}

func (f fakeVolumes) Claim(ns, name string) *corev1.PersistentVolumeClaim {
	return f.claims[ns+"/"+name]
}
func (f fakeVolumes) Volume(name string) *corev1.PersistentVolume {
	for _, v := range f.volumes {
		if v.Name == name {
			return v
		}
	}
	return nil
}
func (f fakeVolumes) Volumes() []*corev1.PersistentVolume { return f.volumes }

func localPV(name, nodeName, class string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: class,
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}},
			}}}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
}

func claim(name, class, volume string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class, VolumeName: volume,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

func usesClaim(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}})
	}
}

func TestVolumeBindingFilter(t *testing.T) {
	nodes := func() []*NodeInfo {
		return []*NodeInfo{info(node("n1", 1000, 1024, 110)), info(node("n2", 1000, 1024, 110))}
	}
	bound := localPV("pv-n1", "n1", "manual")
	bound.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default", Name: "data-bound"}
	bound.Status.Phase = corev1.VolumeBound
	selected := claim("data-selected", "flotilla-local", "")
	selected.Annotations = map[string]string{"volume.kubernetes.io/selected-node": "n2"}
	vols := fakeVolumes{
		claims: map[string]*corev1.PersistentVolumeClaim{
			"default/data-bound":     claim("data-bound", "manual", "pv-n1"),
			"default/data-gone":      claim("data-gone", "manual", "pv-missing"),
			"default/data-immediate": claim("data-immediate", "", ""),
			"default/data-wffc":      claim("data-wffc", "flotilla-local", ""),
			"default/data-selected":  selected,
			"default/data-other":     claim("data-other", "slow", ""),
		},
		volumes: []*corev1.PersistentVolume{bound, localPV("pv-local-n2", "n2", "flotilla-local")},
	}
	// A class other than flotilla-local cannot be provisioned: it needs a matching volume.
	vols.claims["default/data-other"].Annotations = map[string]string{"volume.kubernetes.io/selected-node": ""}
	cases := []struct {
		name  string
		claim string
		on    string
		want  *Status
	}{
		{"bound local PV on its node", "data-bound", "n1", nil},
		{"bound local PV elsewhere", "data-bound", "n2", unresolvable(reasonVolumeNodeConflict)},
		{"bound to a missing PV", "data-gone", "n1", unresolvable(reasonVolumeMissingPV)},
		{"unbound immediate claim", "data-immediate", "n1", unresolvable(reasonUnboundImmediate)},
		{"missing claim", "nope", "n1", unresolvable(`persistentvolumeclaim "nope" not found`)},
		{"WaitForFirstConsumer: matching PV on n2", "data-wffc", "n2", nil},
		{"WaitForFirstConsumer: flotilla-local provisions on n1", "data-wffc", "n1", nil},
		{"selected node is kept", "data-selected", "n1", unresolvable(reasonVolumeNodeConflict)},
		{"selected node", "data-selected", "n2", nil},
		{"delayed claim of a class nobody provisions", "data-other", "n1", unresolvable(reasonVolumeBindConflict)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := NewSnapshot(nodes()...)
			snap.Volumes = vols
			if got := reasonsOf(pod("p", 0, 0, usesClaim(tc.claim)), snap, tc.on); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestEphemeralVolumeFilter: the claim of a generic ephemeral volume is placed as any
// claim once the pod controls it; one the pod does not own keeps it off every node.
func TestEphemeralVolumeFilter(t *testing.T) {
	withEphemeral := func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{}}}})
	}
	p := pod("p", 0, 0, withEphemeral)
	owned := claim("p-scratch", "flotilla-local", "")
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: p.UID, Controller: ptr.To(true)}}
	stranger := claim("p-scratch", "flotilla-local", "")
	stranger.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "uid-of-an-earlier-p", Controller: ptr.To(true)}}
	for _, tc := range []struct {
		name  string
		claim *corev1.PersistentVolumeClaim
		want  *Status
	}{
		{"not created yet", nil, unresolvable(`persistentvolumeclaim "p-scratch" not found`)},
		{"created for the pod", owned, nil},
		{"not created for the pod", stranger, unresolvable("PVC default/p-scratch was not created for pod default/p (pod is not owner)")},
		{"no owner", claim("p-scratch", "flotilla-local", ""), unresolvable("PVC default/p-scratch was not created for pod default/p (pod is not owner)")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vols := fakeVolumes{claims: map[string]*corev1.PersistentVolumeClaim{}}
			if tc.claim != nil {
				vols.claims["default/p-scratch"] = tc.claim
			}
			snap := NewSnapshot(info(node("n1", 1000, 1024, 110)))
			snap.Volumes = vols
			if got := reasonsOf(p, snap, "n1"); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestAffinityNodeNames(t *testing.T) {
	pinned := func(names ...string) *corev1.Pod {
		return pod("ds", 0, 0, func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: names}}}}}}}
		})
	}
	if got, ok := affinityNodeNames(pinned("n2", "n1")); !ok || !reflect.DeepEqual(got, []string{"n1", "n2"}) {
		t.Fatalf("pinned: %v %v", got, ok)
	}
	if got, ok := affinityNodeNames(pod("free", 0, 0)); !ok || got != nil {
		t.Fatalf("free: %v %v", got, ok)
	}
	if _, ok := affinityNodeNames(pinned()); ok {
		t.Fatal("an empty pin allows no node")
	}
}
