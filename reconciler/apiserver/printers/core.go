package printers

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

const none = "<none>"

// podPrinter fills its rows itself: a pod row also carries conditions.
var podPrinter = printer{
	columns: append([]metav1.TableColumnDefinition{nameColumn}, podColumns...),
	row: func(obj runtime.Object, c clock) (metav1.TableRow, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return metav1.TableRow{}, fmt.Errorf("table printer: unexpected object %T", obj)
		}
		return podRow(pod, c), nil
	},
}

var podColumns = []metav1.TableColumnDefinition{
	col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
	col("Status", "string", "The aggregate status of the containers in this pod."),
	col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
	ageColumn,
	wide("IP", "string", "IP address allocated to the pod. Routable at least within the cluster."),
	wide("Node", "string", "NodeName indicates in which node this pod is scheduled."),
	wide("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts other pods on the node."),
	wide("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness."),
}

// podRow computes READY, STATUS and RESTARTS the way kubectl users know them: the phase, replaced
// by the pod's reason, then by the state of the first init container that has not finished
// ("Init:0/1", "Init:CrashLoopBackOff"), then by the waiting or terminated reason of the app
// containers ("CrashLoopBackOff", "Completed"), and "Terminating" while a deletion is pending.
func podRow(pod *corev1.Pod, c clock) metav1.TableRow {
	row := metav1.TableRow{}
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		row.Conditions = []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: string(pod.Status.Phase), Message: "The pod has completed successfully."}}
	case corev1.PodFailed:
		row.Conditions = []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: string(pod.Status.Phase), Message: "The pod failed."}}
	}

	reason := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonSchedulingGated {
			reason = corev1.PodReasonSchedulingGated
		}
	}

	total := len(pod.Spec.Containers)
	ready := 0
	restarts, sidecarRestarts := 0, 0
	var lastRestart, lastSidecarRestart time.Time

	sidecars := map[string]bool{}
	for _, ic := range pod.Spec.InitContainers {
		if ic.RestartPolicy != nil && *ic.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars[ic.Name] = true
			total++
		}
	}

	initializing := false
	for i, st := range pod.Status.InitContainerStatuses {
		restarts += int(st.RestartCount)
		lastRestart = later(lastRestart, st.LastTerminationState)
		if sidecars[st.Name] {
			sidecarRestarts += int(st.RestartCount)
			lastSidecarRestart = later(lastSidecarRestart, st.LastTerminationState)
		}
		switch {
		case st.State.Terminated != nil && st.State.Terminated.ExitCode == 0:
			continue
		case sidecars[st.Name] && st.Started != nil && *st.Started:
			if st.Ready {
				ready++
			}
			continue
		case st.State.Terminated != nil:
			t := st.State.Terminated
			switch {
			case t.Reason != "":
				reason = "Init:" + t.Reason
			case t.Signal != 0:
				reason = fmt.Sprintf("Init:Signal:%d", t.Signal)
			default:
				reason = fmt.Sprintf("Init:ExitCode:%d", t.ExitCode)
			}
		case st.State.Waiting != nil && st.State.Waiting.Reason != "" && st.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + st.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		initializing = true
		break
	}

	if !initializing || podInitialized(pod) {
		restarts, lastRestart = sidecarRestarts, lastSidecarRestart
		hasRunning := false
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			st := pod.Status.ContainerStatuses[i]
			restarts += int(st.RestartCount)
			lastRestart = later(lastRestart, st.LastTerminationState)
			switch t := st.State.Terminated; {
			case st.State.Waiting != nil && st.State.Waiting.Reason != "":
				reason = st.State.Waiting.Reason
			case t != nil && t.Reason != "":
				reason = t.Reason
			case t != nil && t.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", t.Signal)
			case t != nil:
				reason = fmt.Sprintf("ExitCode:%d", t.ExitCode)
			case st.Ready && st.State.Running != nil:
				hasRunning = true
				ready++
			}
		}
		// A container that exited while another still runs: the pod is not completed yet.
		if reason == "Completed" && hasRunning {
			reason = "NotReady"
			if podReady(pod) {
				reason = "Running"
			}
		}
	}

	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if pod.DeletionTimestamp != nil && pod.Status.Reason == "NodeLost" {
		reason = "Unknown"
	} else if pod.DeletionTimestamp != nil && !terminal {
		reason = "Terminating"
	}

	restartText := strconv.Itoa(restarts)
	if restarts != 0 && !lastRestart.IsZero() {
		restartText = fmt.Sprintf("%d (%s ago)", restarts, c.age(metav1.NewTime(lastRestart)))
	}

	ip := none
	if len(pod.Status.PodIPs) > 0 && pod.Status.PodIPs[0].IP != "" {
		ip = pod.Status.PodIPs[0].IP
	} else if pod.Status.PodIP != "" {
		ip = pod.Status.PodIP
	}
	gates := none
	if len(pod.Spec.ReadinessGates) > 0 {
		trueGates := 0
		for _, g := range pod.Spec.ReadinessGates {
			for _, cond := range pod.Status.Conditions {
				if cond.Type == g.ConditionType {
					if cond.Status == corev1.ConditionTrue {
						trueGates++
					}
					break
				}
			}
		}
		gates = fmt.Sprintf("%d/%d", trueGates, len(pod.Spec.ReadinessGates))
	}

	row.Cells = []any{
		pod.Name, fmt.Sprintf("%d/%d", ready, total), reason, restartText, c.age(pod.CreationTimestamp),
		ip, orNone(pod.Spec.NodeName), orNone(pod.Status.NominatedNodeName), gates,
	}
	return row
}

func later(t time.Time, last corev1.ContainerState) time.Time {
	if last.Terminated != nil && last.Terminated.FinishedAt.After(t) {
		return last.Terminated.FinishedAt.Time
	}
	return t
}

func podInitialized(pod *corev1.Pod) bool {
	return podCondition(pod, corev1.PodInitialized)
}

func podReady(pod *corev1.Pod) bool {
	return podCondition(pod, corev1.PodReady)
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == t && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

var podTemplatePrinter = named([]metav1.TableColumnDefinition{
	col("Containers", "string", "Names of each container in the template."),
	col("Images", "string", "Images referenced by each container in the template."),
	col("Pod Labels", "string", "The labels for the pod template."),
}, func(t *corev1.PodTemplate, _ clock) []any {
	names, images := containerCells(t.Template.Spec.Containers)
	return []any{names, images, labels.FormatLabels(t.Template.Labels)}
})

// containerCells are the CONTAINERS and IMAGES cells of workloads: comma-joined, in order.
func containerCells(cs []corev1.Container) (string, string) {
	names := make([]string, len(cs))
	images := make([]string, len(cs))
	for i, c := range cs {
		names[i], images[i] = c.Name, c.Image
	}
	return strings.Join(names, ","), strings.Join(images, ",")
}

var servicePrinter = named([]metav1.TableColumnDefinition{
	col("Type", "string", "type determines how the Service is exposed."),
	col("Cluster-IP", "string", "clusterIP is the IP address of the service and is usually assigned randomly."),
	col("External-IP", "string", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."),
	col("Port(s)", "string", "The list of ports that are exposed by this service."),
	ageColumn,
	wide("Selector", "string", "Route service traffic to pods with label keys and values matching this selector."),
}, func(s *corev1.Service, c clock) []any {
	clusterIP := none
	if len(s.Spec.ClusterIPs) > 0 {
		clusterIP = s.Spec.ClusterIPs[0]
	} else if s.Spec.ClusterIP != "" {
		clusterIP = s.Spec.ClusterIP
	}
	ports := servicePorts(s.Spec.Ports)
	if ports == "" {
		ports = none
	}
	return []any{string(s.Spec.Type), clusterIP, serviceExternalIP(s), ports, c.age(s.CreationTimestamp), labels.FormatLabels(s.Spec.Selector)}
})

// servicePorts renders "80/TCP" or, with a node port, "80:30080/TCP", comma-joined.
func servicePorts(ports []corev1.ServicePort) string {
	parts := make([]string, len(ports))
	for i, p := range ports {
		if p.NodePort > 0 {
			parts[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
		} else {
			parts[i] = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		}
	}
	return strings.Join(parts, ",")
}

func serviceExternalIP(s *corev1.Service) string {
	switch s.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		if len(s.Spec.ExternalIPs) > 0 {
			return strings.Join(s.Spec.ExternalIPs, ",")
		}
		return none
	case corev1.ServiceTypeLoadBalancer:
		addrs := loadBalancerAddresses(s.Status.LoadBalancer.Ingress)
		addrs = append(addrs, s.Spec.ExternalIPs...)
		if len(addrs) == 0 {
			return "<pending>"
		}
		return strings.Join(addrs, ",")
	case corev1.ServiceTypeExternalName:
		return s.Spec.ExternalName
	}
	return "<unknown>"
}

func loadBalancerAddresses(ings []corev1.LoadBalancerIngress) []string {
	var out []string
	for _, ing := range ings {
		if ing.IP != "" {
			out = append(out, ing.IP)
		} else if ing.Hostname != "" {
			out = append(out, ing.Hostname)
		}
	}
	return out
}

var endpointsPrinter = named([]metav1.TableColumnDefinition{
	col("Endpoints", "string", "The set of all endpoints is the union of all subsets."),
	ageColumn,
}, func(e *corev1.Endpoints, c clock) []any {
	return []any{formatEndpoints(e), c.age(e.CreationTimestamp)}
})

// formatEndpoints lists up to three ip:port pairs, then "+ N more...".
func formatEndpoints(e *corev1.Endpoints) string {
	if len(e.Subsets) == 0 {
		return none
	}
	const max = 3
	var list []string
	count := 0
	add := func(s string) {
		if len(list) < max {
			list = append(list, s)
		}
		count++
	}
	for _, ss := range e.Subsets {
		if len(ss.Ports) == 0 {
			// Headless services may have no ports.
			for _, a := range ss.Addresses {
				add(a.IP)
			}
			continue
		}
		for _, p := range ss.Ports {
			for _, a := range ss.Addresses {
				add(net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
			}
		}
	}
	ret := strings.Join(list, ",")
	if count > max {
		return fmt.Sprintf("%s + %d more...", ret, count-max)
	}
	return ret
}

var namespacePrinter = named([]metav1.TableColumnDefinition{
	col("Status", "string", "The status of the namespace"),
	ageColumn,
}, func(n *corev1.Namespace, c clock) []any {
	return []any{string(n.Status.Phase), c.age(n.CreationTimestamp)}
})

const nodeRolePrefix = "node-role.kubernetes.io/"

var nodePrinter = named([]metav1.TableColumnDefinition{
	col("Status", "string", "The status of the node"),
	col("Roles", "string", "The roles of the node"),
	ageColumn,
	col("Version", "string", "Kubelet Version reported by the node."),
	wide("Internal-IP", "string", "List of addresses reachable to the node."),
	wide("External-IP", "string", "List of addresses reachable to the node."),
	wide("OS-Image", "string", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
	wide("Kernel-Version", "string", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
	wide("Container-Runtime", "string", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
}, func(n *corev1.Node, c clock) []any {
	status := "Unknown"
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			status = "NotReady"
			if cond.Status == corev1.ConditionTrue {
				status = "Ready"
			}
		}
	}
	if n.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	roles := nodeRoles(n.Labels)
	info := n.Status.NodeInfo
	return []any{
		status, roles, c.age(n.CreationTimestamp), info.KubeletVersion,
		nodeAddress(n, corev1.NodeInternalIP), nodeAddress(n, corev1.NodeExternalIP),
		orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion),
	}
})

// nodeRoles reads node-role.kubernetes.io/<role> labels and the older kubernetes.io/role label.
func nodeRoles(l map[string]string) string {
	set := map[string]bool{}
	for k, v := range l {
		switch {
		case strings.HasPrefix(k, nodeRolePrefix):
			if role := strings.TrimPrefix(k, nodeRolePrefix); role != "" {
				set[role] = true
			}
		case k == "kubernetes.io/role" && v != "":
			set[v] = true
		}
	}
	if len(set) == 0 {
		return none
	}
	roles := make([]string, 0, len(set))
	for r := range set {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	return strings.Join(roles, ",")
}

func nodeAddress(n *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return none
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

var configMapPrinter = named([]metav1.TableColumnDefinition{
	col("Data", "string", "Data contains the configuration data."),
	ageColumn,
}, func(cm *corev1.ConfigMap, c clock) []any {
	return []any{int64(len(cm.Data) + len(cm.BinaryData)), c.age(cm.CreationTimestamp)}
})

var secretPrinter = named([]metav1.TableColumnDefinition{
	col("Type", "string", "Used to facilitate programmatic handling of secret data."),
	col("Data", "string", "Data contains the secret data."),
	ageColumn,
}, func(s *corev1.Secret, c clock) []any {
	// stringData is folded into data on write; count it too for objects not yet stored.
	n := len(s.Data)
	for k := range s.StringData {
		if _, ok := s.Data[k]; !ok {
			n++
		}
	}
	return []any{string(s.Type), int64(n), c.age(s.CreationTimestamp)}
})

var serviceAccountPrinter = named([]metav1.TableColumnDefinition{
	col("Secrets", "string", "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use."),
	ageColumn,
}, func(sa *corev1.ServiceAccount, c clock) []any {
	return []any{int64(len(sa.Secrets)), c.age(sa.CreationTimestamp)}
})

// eventPrinter serves core/v1 and events.k8s.io/v1 Events. It is the one printer whose first
// column is not NAME: kubectl shows LAST SEEN first and NAME only with -o wide, as upstream.
var eventPrinter = printer{
	columns: []metav1.TableColumnDefinition{
		col("Last Seen", "string", "The time at which the most recent occurrence of this event was recorded."),
		col("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future"),
		col("Reason", "string", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
		col("Object", "string", "The object that this event is about."),
		wide("Subobject", "string", "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement."),
		wide("Source", "string", "The component reporting this event."),
		col("Message", "string", "A human-readable description of the status of this operation."),
		wide("First Seen", "string", "The time at which the event was first recorded."),
		wide("Count", "string", "The number of times this event has occurred."),
		{Name: "Name", Type: "string", Format: "name", Priority: 1, Description: nameColumn.Description},
	},
	row: func(obj runtime.Object, c clock) (metav1.TableRow, error) {
		switch e := obj.(type) {
		case *corev1.Event:
			return metav1.TableRow{Cells: eventCells(e, c)}, nil
		case *eventsv1.Event:
			return metav1.TableRow{Cells: eventCells(coreEvent(e), c)}, nil
		}
		return metav1.TableRow{}, fmt.Errorf("table printer: unexpected object %T", obj)
	},
}

func eventCells(e *corev1.Event, c clock) []any {
	first := c.age(e.FirstTimestamp)
	if e.FirstTimestamp.IsZero() {
		first = c.ageMicro(e.EventTime)
	}
	last := c.age(e.LastTimestamp)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last = c.ageMicro(e.Series.LastObservedTime)
		count = e.Series.Count
	} else if count == 0 {
		count = 1 // singleton events of the events.k8s.io API carry no count
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	component, instance := e.Source.Component, e.Source.Host
	if component == "" {
		component = e.ReportingController
	}
	if instance == "" {
		instance = e.ReportingInstance
	}
	source := component
	if instance != "" {
		source += ", " + instance
	}
	return []any{last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source, strings.TrimSpace(e.Message), first, int64(count), e.Name}
}

// coreEvent maps an events.k8s.io/v1 Event onto the core/v1 fields the printer reads.
func coreEvent(e *eventsv1.Event) *corev1.Event {
	out := &corev1.Event{
		ObjectMeta:          e.ObjectMeta,
		InvolvedObject:      e.Regarding,
		Reason:              e.Reason,
		Message:             e.Note,
		Source:              e.DeprecatedSource,
		FirstTimestamp:      e.DeprecatedFirstTimestamp,
		LastTimestamp:       e.DeprecatedLastTimestamp,
		Count:               e.DeprecatedCount,
		Type:                e.Type,
		EventTime:           e.EventTime,
		Action:              e.Action,
		ReportingController: e.ReportingController,
		ReportingInstance:   e.ReportingInstance,
	}
	if e.Series != nil {
		out.Series = &corev1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	return out
}

var persistentVolumePrinter = named([]metav1.TableColumnDefinition{
	col("Capacity", "string", "capacity is the description of the persistent volume's resources and capacity."),
	col("Access Modes", "string", "accessModes contains all ways the volume can be mounted."),
	col("Reclaim Policy", "string", "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim."),
	col("Status", "string", "phase indicates if a volume is available, bound to a claim, or released by a claim."),
	col("Claim", "string", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim."),
	col("StorageClass", "string", "storageClassName is the name of StorageClass to which this persistent volume belongs."),
	col("VolumeAttributesClass", "string", "Name of VolumeAttributesClass to which this persistent volume belongs."),
	col("Reason", "string", "reason is a brief CamelCase string that describes any failure."),
	ageColumn,
	wide("VolumeMode", "string", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state."),
}, func(pv *corev1.PersistentVolume, c clock) []any {
	claim := ""
	if r := pv.Spec.ClaimRef; r != nil {
		claim = r.Namespace + "/" + r.Name
	}
	phase := string(pv.Status.Phase)
	if pv.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	class := pv.Spec.StorageClassName
	if v, ok := pv.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		class = v
	}
	capacity := pv.Spec.Capacity[corev1.ResourceStorage]
	return []any{
		capacity.String(), accessModes(pv.Spec.AccessModes), string(pv.Spec.PersistentVolumeReclaimPolicy), phase, claim,
		class, unsetIfEmpty(pv.Spec.VolumeAttributesClassName), pv.Status.Reason, c.age(pv.CreationTimestamp), volumeMode(pv.Spec.VolumeMode),
	}
})

var persistentVolumeClaimPrinter = named([]metav1.TableColumnDefinition{
	col("Status", "string", "phase represents the current phase of PersistentVolumeClaim."),
	col("Volume", "string", "volumeName is the binding reference to the PersistentVolume backing this claim."),
	col("Capacity", "string", "capacity represents the actual resources of the underlying volume."),
	col("Access Modes", "string", "accessModes contains the actual access modes the volume backing the PVC has."),
	col("StorageClass", "string", "storageClassName is the name of the StorageClass required by the claim."),
	col("VolumeAttributesClass", "string", "volumeAttributesClassName may be used to set the VolumeAttributesClass used by this claim."),
	ageColumn,
	wide("VolumeMode", "string", "volumeMode defines what type of volume is required by the claim."),
}, func(pvc *corev1.PersistentVolumeClaim, c clock) []any {
	phase := string(pvc.Status.Phase)
	if pvc.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	capacity, modes := "", ""
	if pvc.Spec.VolumeName != "" {
		q := pvc.Status.Capacity[corev1.ResourceStorage]
		capacity, modes = q.String(), accessModes(pvc.Status.AccessModes)
	}
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	if v, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		class = v
	}
	return []any{
		phase, pvc.Spec.VolumeName, capacity, modes, class, unsetIfEmpty(pvc.Spec.VolumeAttributesClassName),
		c.age(pvc.CreationTimestamp), volumeMode(pvc.Spec.VolumeMode),
	}
})

// accessModes abbreviates access modes (RWO, ROX, RWX, RWOP) in a fixed order, without
// duplicates.
func accessModes(modes []corev1.PersistentVolumeAccessMode) string {
	has := map[corev1.PersistentVolumeAccessMode]bool{}
	for _, m := range modes {
		has[m] = true
	}
	var out []string
	for _, m := range []struct {
		mode  corev1.PersistentVolumeAccessMode
		short string
	}{
		{corev1.ReadWriteOnce, "RWO"}, {corev1.ReadOnlyMany, "ROX"}, {corev1.ReadWriteMany, "RWX"}, {corev1.ReadWriteOncePod, "RWOP"},
	} {
		if has[m.mode] {
			out = append(out, m.short)
		}
	}
	return strings.Join(out, ",")
}

func unsetIfEmpty(s *string) string {
	if s == nil || *s == "" {
		return "<unset>"
	}
	return *s
}

func volumeMode(m *corev1.PersistentVolumeMode) string {
	if m == nil {
		return "<unset>"
	}
	return string(*m)
}

var resourceQuotaPrinter = named([]metav1.TableColumnDefinition{
	ageColumn,
	col("Request", "string", "Request represents a minimum amount of cpu/memory that a container may consume."),
	col("Limit", "string", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
}, func(q *corev1.ResourceQuota, c clock) []any {
	names := make([]string, 0, len(q.Status.Hard))
	for n := range q.Status.Hard {
		names = append(names, string(n))
	}
	sort.Strings(names)
	var requests, limits []string
	for _, n := range names {
		used, hard := q.Status.Used[corev1.ResourceName(n)], q.Status.Hard[corev1.ResourceName(n)]
		text := fmt.Sprintf("%s: %s/%s", n, used.String(), hard.String())
		if strings.HasPrefix(n, "limits.") {
			limits = append(limits, text)
		} else {
			requests = append(requests, text)
		}
	}
	return []any{c.age(q.CreationTimestamp), strings.Join(requests, ", "), strings.Join(limits, ", ")}
})

var limitRangePrinter = named([]metav1.TableColumnDefinition{
	col("Created At", "date", "CreationTimestamp is a timestamp representing the server time when this object was created."),
}, func(lr *corev1.LimitRange, _ clock) []any {
	return []any{lr.CreationTimestamp.UTC().Format(time.RFC3339)}
})
