package scheduler

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Defaults a pod without requests counts for when spreading by score (not when fitting),
// as upstream: otherwise best-effort pods would all pile onto one node.
const (
	defaultMilliCPURequest int64 = 100               // 0.1 core
	defaultMemoryRequest   int64 = 200 * 1024 * 1024 // 200 MiB
)

// Resource is an amount of each resource the scheduler accounts for.
type Resource struct {
	MilliCPU         int64
	Memory           int64
	EphemeralStorage int64
	Pods             int64
	// Scalar holds extended resources (and hugepages) in their integer value.
	Scalar map[corev1.ResourceName]int64
}

// NewResource reads a ResourceList.
func NewResource(rl corev1.ResourceList) Resource {
	var r Resource
	for name, q := range rl {
		r.addQuantity(name, q)
	}
	return r
}

func (r *Resource) addQuantity(name corev1.ResourceName, q resource.Quantity) {
	switch name {
	case corev1.ResourceCPU:
		r.MilliCPU += q.MilliValue()
	case corev1.ResourceMemory:
		r.Memory += q.Value()
	case corev1.ResourceEphemeralStorage:
		r.EphemeralStorage += q.Value()
	case corev1.ResourcePods:
		r.Pods += q.Value()
	default:
		if r.Scalar == nil {
			r.Scalar = map[corev1.ResourceName]int64{}
		}
		r.Scalar[name] += q.Value()
	}
}

// Add adds o to r.
func (r *Resource) Add(o Resource) {
	r.MilliCPU += o.MilliCPU
	r.Memory += o.Memory
	r.EphemeralStorage += o.EphemeralStorage
	r.Pods += o.Pods
	for k, v := range o.Scalar {
		if r.Scalar == nil {
			r.Scalar = map[corev1.ResourceName]int64{}
		}
		r.Scalar[k] += v
	}
}

// Sub subtracts o from r.
func (r *Resource) Sub(o Resource) {
	r.MilliCPU -= o.MilliCPU
	r.Memory -= o.Memory
	r.EphemeralStorage -= o.EphemeralStorage
	r.Pods -= o.Pods
	for k, v := range o.Scalar {
		if r.Scalar == nil {
			r.Scalar = map[corev1.ResourceName]int64{}
		}
		r.Scalar[k] -= v
	}
}

// Clone returns a deep copy.
func (r Resource) Clone() Resource {
	out := r
	if r.Scalar != nil {
		out.Scalar = make(map[corev1.ResourceName]int64, len(r.Scalar))
		for k, v := range r.Scalar {
			out.Scalar[k] = v
		}
	}
	return out
}

// hostPort is one host port a pod claims.
type hostPort struct {
	IP       string
	Protocol corev1.Protocol
	Port     int32
}

// affinityTerm is a pod (anti-)affinity term with its selectors parsed once.
type affinityTerm struct {
	topologyKey string
	weight      int32
	namespaces  map[string]bool
	// nsSelector is nil when the term names its namespaces (or means the pod's own).
	nsSelector labels.Selector
	selector   labels.Selector
}

// PodInfo is a pod with what the scheduler derives from it once: requests, host ports and
// parsed affinity terms.
type PodInfo struct {
	Pod *corev1.Pod
	// Requests is what the pod needs to fit: max(init containers) vs sum(containers), plus
	// sidecars and overhead (component-helpers/resource).
	Requests Resource
	// NonZero is Requests with defaults for unset cpu/memory, used for spreading scores.
	NonZero   Resource
	HostPorts []hostPort
	// Images are the normalized image names of all containers (for image locality).
	Images []string

	requiredNodeAffinity nodeaffinity.RequiredNodeAffinity
	requiredAffinity     []affinityTerm
	requiredAnti         []affinityTerm
	preferredAffinity    []affinityTerm
	preferredAnti        []affinityTerm
	parseErr             error
}

// NewPodInfo derives the scheduler's view of pod.
func NewPodInfo(pod *corev1.Pod) *PodInfo {
	pi := &PodInfo{Pod: pod}
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	pi.Requests = NewResource(reqs)
	pi.Requests.Pods = 0
	nz := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		NonMissingContainerRequests: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(defaultMilliCPURequest, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(defaultMemoryRequest, resource.BinarySI),
		},
	})
	pi.NonZero = Resource{MilliCPU: nz.Cpu().MilliValue(), Memory: nz.Memory().Value()}
	for _, c := range pod.Spec.InitContainers {
		pi.HostPorts = appendHostPorts(pi.HostPorts, c.Ports)
		pi.Images = append(pi.Images, normalizeImageName(c.Image))
	}
	for _, c := range pod.Spec.Containers {
		pi.HostPorts = appendHostPorts(pi.HostPorts, c.Ports)
		pi.Images = append(pi.Images, normalizeImageName(c.Image))
	}
	pi.requiredNodeAffinity = nodeaffinity.GetRequiredNodeAffinity(pod)
	if a := pod.Spec.Affinity; a != nil {
		var err error
		if pa := a.PodAffinity; pa != nil {
			if pi.requiredAffinity, err = parseTerms(pod, pa.RequiredDuringSchedulingIgnoredDuringExecution, nil); err != nil {
				pi.parseErr = err
			}
			if pi.preferredAffinity, err = parseTerms(pod, nil, pa.PreferredDuringSchedulingIgnoredDuringExecution); err != nil {
				pi.parseErr = err
			}
		}
		if pa := a.PodAntiAffinity; pa != nil {
			if pi.requiredAnti, err = parseTerms(pod, pa.RequiredDuringSchedulingIgnoredDuringExecution, nil); err != nil {
				pi.parseErr = err
			}
			if pi.preferredAnti, err = parseTerms(pod, nil, pa.PreferredDuringSchedulingIgnoredDuringExecution); err != nil {
				pi.parseErr = err
			}
		}
	}
	return pi
}

func appendHostPorts(out []hostPort, ports []corev1.ContainerPort) []hostPort {
	for _, p := range ports {
		if p.HostPort <= 0 {
			continue
		}
		ip := p.HostIP
		if ip == "" {
			ip = "0.0.0.0"
		}
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		out = append(out, hostPort{IP: ip, Protocol: proto, Port: p.HostPort})
	}
	return out
}

// hasPodAffinityConstraints reports whether the pod's placement depends on other pods.
func (pi *PodInfo) hasPodAffinityConstraints() bool {
	return len(pi.requiredAffinity)+len(pi.requiredAnti)+len(pi.preferredAffinity)+len(pi.preferredAnti) > 0 ||
		len(pi.Pod.Spec.TopologySpreadConstraints) > 0
}

// NodeInfo is a node with the pods the scheduler counts on it (bound and assumed).
type NodeInfo struct {
	Node *corev1.Node
	Pods map[string]*PodInfo // by UID
	// Allocatable is node.status.allocatable.
	Allocatable Resource
	// Requested sums the pods' Requests; NonZeroRequested their NonZero.
	Requested        Resource
	NonZeroRequested Resource
	UsedPorts        map[hostPort]int
	// PodsWithAffinity counts pods with any pod (anti-)affinity; PodsWithRequiredAnti lists
	// those whose required anti-affinity every incoming pod must respect.
	PodsWithAffinity     int
	PodsWithRequiredAnti map[string]*PodInfo
	// Images maps every name of an image present on the node to its size.
	Images map[string]int64
}

// NewNodeInfo builds a NodeInfo for node with pods on it.
func NewNodeInfo(node *corev1.Node, pods ...*PodInfo) *NodeInfo {
	ni := &NodeInfo{Pods: map[string]*PodInfo{}, UsedPorts: map[hostPort]int{}, PodsWithRequiredAnti: map[string]*PodInfo{}}
	ni.SetNode(node)
	for _, p := range pods {
		ni.AddPod(p)
	}
	return ni
}

// SetNode replaces the node object.
func (ni *NodeInfo) SetNode(node *corev1.Node) {
	ni.Node = node
	if node == nil {
		return
	}
	ni.Allocatable = NewResource(node.Status.Allocatable)
	ni.Images = map[string]int64{}
	for _, img := range node.Status.Images {
		for _, n := range img.Names {
			ni.Images[normalizeImageName(n)] = img.SizeBytes
		}
	}
}

// Name is the node's name ("" before the node object is known).
func (ni *NodeInfo) Name() string {
	if ni.Node == nil {
		return ""
	}
	return ni.Node.Name
}

// AddPod counts pod on the node.
func (ni *NodeInfo) AddPod(p *PodInfo) {
	uid := string(p.Pod.UID)
	if _, ok := ni.Pods[uid]; ok {
		ni.RemovePod(uid)
	}
	ni.Pods[uid] = p
	ni.Requested.Add(p.Requests)
	ni.NonZeroRequested.Add(p.NonZero)
	for _, hp := range p.HostPorts {
		ni.UsedPorts[hp]++
	}
	if len(p.requiredAffinity)+len(p.requiredAnti)+len(p.preferredAffinity)+len(p.preferredAnti) > 0 {
		ni.PodsWithAffinity++
	}
	if len(p.requiredAnti) > 0 {
		ni.PodsWithRequiredAnti[uid] = p
	}
}

// RemovePod stops counting the pod with uid; it reports whether it was there.
func (ni *NodeInfo) RemovePod(uid string) bool {
	p, ok := ni.Pods[uid]
	if !ok {
		return false
	}
	delete(ni.Pods, uid)
	ni.Requested.Sub(p.Requests)
	ni.NonZeroRequested.Sub(p.NonZero)
	for _, hp := range p.HostPorts {
		if ni.UsedPorts[hp]--; ni.UsedPorts[hp] <= 0 {
			delete(ni.UsedPorts, hp)
		}
	}
	if len(p.requiredAffinity)+len(p.requiredAnti)+len(p.preferredAffinity)+len(p.preferredAnti) > 0 {
		ni.PodsWithAffinity--
	}
	delete(ni.PodsWithRequiredAnti, uid)
	return true
}

// normalizeImageName gives image references one spelling, as the container runtime reports
// them: docker.io/library/ for bare names and :latest when neither tag nor digest is given.
func normalizeImageName(name string) string {
	if !strings.Contains(name, "@") {
		last := name[strings.LastIndex(name, "/")+1:]
		if !strings.Contains(last, ":") {
			name += ":latest"
		}
	}
	first, _, hasSlash := strings.Cut(name, "/")
	if !hasSlash {
		return "docker.io/library/" + name
	}
	if !strings.ContainsAny(first, ".:") && first != "localhost" {
		return "docker.io/" + name
	}
	return name
}
