package agent

import (
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// envSources is what environment variables may refer to besides the pod itself.
type envSources struct {
	ConfigMap func(namespace, name string) (*corev1.ConfigMap, error)
	Secret    func(namespace, name string) (*corev1.Secret, error)
	// Services are the Services whose variables a container sees (envServices).
	Services []*corev1.Service
}

// containerEnv computes a container's environment as KEY=VALUE in the order the kubelet
// gives it: service variables, then envFrom, then env (later entries win), with $(VAR)
// references expanded against what came before.
func containerEnv(pod *corev1.Pod, c *corev1.Container, src envSources) ([]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, kv := range serviceEnv(src.Services) {
		set(kv[0], kv[1])
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			optional := from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional
			cm, err := src.ConfigMap(pod.Namespace, from.ConfigMapRef.Name)
			if err != nil {
				if optional && apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("envFrom configMap %q: %w", from.ConfigMapRef.Name, err)
			}
			for _, k := range sortedKeys(cm.Data) {
				set(from.Prefix+k, cm.Data[k])
			}
		case from.SecretRef != nil:
			optional := from.SecretRef.Optional != nil && *from.SecretRef.Optional
			s, err := src.Secret(pod.Namespace, from.SecretRef.Name)
			if err != nil {
				if optional && apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("envFrom secret %q: %w", from.SecretRef.Name, err)
			}
			keys := make([]string, 0, len(s.Data))
			for k := range s.Data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				set(from.Prefix+k, string(s.Data[k]))
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expandVars(e.Value, vars))
			continue
		}
		v, ok, err := envValueFrom(pod, c, e.ValueFrom, src)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// envValueFrom resolves one valueFrom; ok is false when an optional source is missing.
func envValueFrom(pod *corev1.Pod, c *corev1.Container, from *corev1.EnvVarSource, src envSources) (string, bool, error) {
	switch {
	case from.FieldRef != nil:
		v, err := podFieldValue(pod, from.FieldRef.FieldPath)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := resourceFieldValue(pod, c, from.ResourceFieldRef)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		optional := ref.Optional != nil && *ref.Optional
		cm, err := src.ConfigMap(pod.Namespace, ref.Name)
		if err != nil {
			if optional && apierrors.IsNotFound(err) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("configMap %q: %w", ref.Name, err)
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("configMap %q has no key %q", ref.Name, ref.Key)
		}
		return v, true, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		s, err := src.Secret(pod.Namespace, ref.Name)
		if err != nil {
			if optional && apierrors.IsNotFound(err) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("secret %q: %w", ref.Name, err)
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("secret %q has no key %q", ref.Name, ref.Key)
		}
		return string(v), true, nil
	}
	return "", false, fmt.Errorf("valueFrom names no source")
}

// podFieldValue answers a downward-API fieldPath.
func podFieldValue(pod *corev1.Pod, path string) (string, error) {
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.hostIPs":
		return joinIPs(pod.Status.HostIPs), nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.podIPs":
		var ips []string
		for _, ip := range pod.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		return strings.Join(ips, ","), nil
	}
	return "", fmt.Errorf("fieldPath %q is not supported", path)
}

func joinIPs(ips []corev1.HostIP) string {
	var s []string
	for _, ip := range ips {
		s = append(s, ip.IP)
	}
	return strings.Join(s, ",")
}

// subscript parses `prefix['key']`.
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// formatMap renders labels or annotations as the downward API does: key="value" lines.
func formatMap(m map[string]string) string {
	var lines []string
	for _, k := range sortedKeys(m) {
		lines = append(lines, fmt.Sprintf("%s=%q", k, m[k]))
	}
	return strings.Join(lines, "\n")
}

// resourceFieldValue answers a resourceFieldRef; an unset limit reports the node's allocatable
// in upstream, here the container value or 0 when unset.
func resourceFieldValue(pod *corev1.Pod, c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		found := false
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == ref.ContainerName {
				c = &pod.Spec.Containers[i]
				found = true
			}
		}
		if !found {
			return "", fmt.Errorf("resourceFieldRef: no container %q", ref.ContainerName)
		}
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("resourceFieldRef: resource %q must be limits.<name> or requests.<name>", ref.Resource)
	}
	var list corev1.ResourceList
	switch kind {
	case "limits":
		list = c.Resources.Limits
	case "requests":
		list = c.Resources.Requests
	default:
		return "", fmt.Errorf("resourceFieldRef: resource %q must be limits.<name> or requests.<name>", ref.Resource)
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		return "0", nil
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if name == string(corev1.ResourceCPU) {
		v := int64(math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue())))
		return strconv.FormatInt(v, 10), nil
	}
	v := int64(math.Ceil(float64(q.Value()) / float64(divisor.Value())))
	return strconv.FormatInt(v, 10), nil
}

// expandVars replaces $(NAME) with earlier variables; $$ escapes, unknown references stay.
func expandVars(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// masterServices are the Services of namespace default whose variables every container
// gets, whatever its pod's enableServiceLinks says.
var masterServices = []string{"kubernetes"}

// envServices picks the Services whose variables the containers of pod see, as the kubelet:
// the master Services of namespace default always, and with enableServiceLinks (the default)
// every Service of the pod's namespace, which wins over a master Service of the same name.
// Services without a cluster IP give no variables and are left out.
func envServices(pod *corev1.Pod, lister corelisters.ServiceLister) ([]*corev1.Service, error) {
	byName := map[string]*corev1.Service{}
	for _, name := range masterServices {
		s, err := lister.Services(metav1.NamespaceDefault).Get(name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("service %s/%s: %w", metav1.NamespaceDefault, name, err)
		}
		if hasClusterIP(s) {
			byName[name] = s
		}
	}
	if pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks {
		svcs, err := lister.Services(pod.Namespace).List(labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("list the services of namespace %s: %w", pod.Namespace, err)
		}
		for _, s := range svcs {
			if hasClusterIP(s) {
				byName[s.Name] = s
			}
		}
	}
	out := make([]*corev1.Service, 0, len(byName))
	for _, s := range byName {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func hasClusterIP(s *corev1.Service) bool {
	return s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone
}

// serviceEnv gives the docker-links style variables of Services, sorted by Service name.
func serviceEnv(services []*corev1.Service) [][2]string {
	svcs := append([]*corev1.Service(nil), services...)
	sort.Slice(svcs, func(i, j int) bool { return svcs[i].Name < svcs[j].Name })
	var out [][2]string
	for _, s := range svcs {
		ip := s.Spec.ClusterIP
		if !hasClusterIP(s) || len(s.Spec.Ports) == 0 {
			continue
		}
		name := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		first := s.Spec.Ports[0]
		out = append(out, [2]string{name + "_SERVICE_HOST", ip}, [2]string{name + "_SERVICE_PORT", strconv.Itoa(int(first.Port))})
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				pn := strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_"))
				out = append(out, [2]string{name + "_SERVICE_PORT_" + pn, strconv.Itoa(int(p.Port))})
			}
		}
		proto := strings.ToLower(string(first.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		out = append(out, [2]string{name + "_PORT", proto + "://" + net.JoinHostPort(ip, strconv.Itoa(int(first.Port)))})
		for _, p := range s.Spec.Ports {
			pr := strings.ToLower(string(p.Protocol))
			if pr == "" {
				pr = "tcp"
			}
			prefix := fmt.Sprintf("%s_PORT_%d_%s", name, p.Port, strings.ToUpper(pr))
			out = append(out,
				[2]string{prefix, pr + "://" + net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))},
				[2]string{prefix + "_PROTO", pr},
				[2]string{prefix + "_PORT", strconv.Itoa(int(p.Port))},
				[2]string{prefix + "_ADDR", ip})
		}
	}
	return out
}
