package agent

import (
	"bufio"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// hostResolv is the host's resolver configuration, parsed from /etc/resolv.conf.
type hostResolv struct {
	Nameservers, Searches, Options []string
}

func parseResolvConf(text string) hostResolv {
	var r hostResolv
	s := bufio.NewScanner(strings.NewReader(text))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			r.Nameservers = append(r.Nameservers, f[1])
		case "search", "domain":
			r.Searches = append(r.Searches, f[1:]...)
		case "options":
			r.Options = append(r.Options, f[1:]...)
		}
	}
	return r
}

// resolvConf renders a pod's /etc/resolv.conf per its dnsPolicy and dnsConfig, as the kubelet
// does.
func resolvConf(pod *corev1.Pod, clusterDNS, domain string, host hostResolv) string {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = corev1.DNSClusterFirst
	}
	if policy == corev1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = corev1.DNSDefault
	}
	var ns, search, opts []string
	switch policy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet:
		ns = []string{clusterDNS}
		search = []string{pod.Namespace + ".svc." + domain, "svc." + domain, domain}
		search = append(search, host.Searches...)
		opts = []string{"ndots:5"}
	case corev1.DNSDefault:
		ns, search, opts = host.Nameservers, host.Searches, host.Options
	case corev1.DNSNone:
	}
	if c := pod.Spec.DNSConfig; c != nil {
		ns = appendUnique(ns, c.Nameservers...)
		search = appendUnique(search, c.Searches...)
		for _, o := range c.Options {
			kv := o.Name
			if o.Value != nil {
				kv += ":" + *o.Value
			}
			// A pod option replaces one of the same name.
			kept := opts[:0:0]
			for _, old := range opts {
				if name, _, _ := strings.Cut(old, ":"); name != o.Name {
					kept = append(kept, old)
				}
			}
			opts = append(kept, kv)
		}
	}
	if len(ns) > 3 {
		ns = ns[:3]
	}
	if len(search) > 32 {
		search = search[:32]
	}
	var b strings.Builder
	for _, n := range ns {
		fmt.Fprintf(&b, "nameserver %s\n", n)
	}
	if len(search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(search, " "))
	}
	if len(opts) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(opts, " "))
	}
	return b.String()
}

func appendUnique(list []string, more ...string) []string {
	for _, m := range more {
		dup := false
		for _, l := range list {
			if l == m {
				dup = true
			}
		}
		if !dup {
			list = append(list, m)
		}
	}
	return list
}

// podHostname is the pod's hostname and, with a subdomain, its fully qualified name.
func podHostname(pod *corev1.Pod, domain string) (string, string) {
	h := pod.Name
	if pod.Spec.Hostname != "" {
		h = pod.Spec.Hostname
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	fqdn := ""
	if pod.Spec.Subdomain != "" {
		fqdn = fmt.Sprintf("%s.%s.%s.svc.%s", h, pod.Spec.Subdomain, pod.Namespace, domain)
	}
	return h, fqdn
}

// containerHostname is the hostname the pod's containers get: its hostname, or with
// setHostnameAsFQDN and a subdomain its fully qualified name, which Linux allows up to 64
// characters long (longer is an error, as the kubelet's, and the pod does not start).
func containerHostname(pod *corev1.Pod, domain string) (string, error) {
	h, fqdn := podHostname(pod, domain)
	if pod.Spec.SetHostnameAsFQDN == nil || !*pod.Spec.SetHostnameAsFQDN || fqdn == "" || pod.Spec.HostNetwork {
		return h, nil
	}
	if len(fqdn) > maxFQDNHostname {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested): shorten the pod's hostname or subdomain, or unset setHostnameAsFQDN",
			fqdn, maxFQDNHostname, len(fqdn))
	}
	return fqdn, nil
}

// maxFQDNHostname is the longest hostname Linux takes (HOST_NAME_MAX).
const maxFQDNHostname = 64

// etcHosts renders the pod's /etc/hosts: loopback, its own address and name, hostAliases.
func etcHosts(pod *corev1.Pod, podIPs []string, domain string) string {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file (flotilla).\n")
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
	h, fqdn := podHostname(pod, domain)
	for _, ip := range podIPs {
		if fqdn != "" {
			fmt.Fprintf(&b, "%s\t%s\t%s\n", ip, fqdn, h)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, h)
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return b.String()
}
