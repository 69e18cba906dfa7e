package dns

import (
	"fmt"
	"net"
	"strconv"

	mdns "github.com/miekg/dns"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/informers"
)

// Defaults of Config.
const (
	DefaultDomain = "cluster.local"
	DefaultPort   = 53
	// InterfaceName is the dummy interface that carries the DNS address on each host.
	InterfaceName = "flotilla-dns"
	// DefaultResolvConf is where the host's upstream resolvers are read from.
	DefaultResolvConf = "/etc/resolv.conf"
)

// DefaultListenIP is the kube-dns ClusterIP: the 10th address of the default Service CIDR.
var DefaultListenIP = net.IPv4(10, 96, 0, 10)

// Config configures the per-host cluster DNS server.
type Config struct {
	// ListenIP is where the server answers (default 10.96.0.10). Run adds it to the dummy
	// interface "flotilla-dns" (to lo where the kernel has no dummy driver) of the current
	// network namespace unless it is already local (loopback always is), and removes it on exit.
	ListenIP net.IP
	// Port is the UDP and TCP port (default 53).
	Port int
	// Domain is the cluster domain (default "cluster.local").
	Domain string
	// Upstreams ("ip:port") receive every query outside the cluster domain. Run defaults them
	// to the nameservers of /etc/resolv.conf.
	Upstreams []string
	// Log receives the server's events (default: the standard logrus logger).
	Log *logrus.Entry
	// Informers is the host's shared factory; nil makes one of its own. Run registers the
	// Service, EndpointSlice and (cluster-wide) Pod informers on it and starts them with the
	// ctx given to Run, so give every user of one factory the host's context. Objects of a
	// shared factory are kept whole (SlimObjects applies only to Run's own factory), and Run
	// never shuts a shared factory down.
	Informers informers.SharedInformerFactory
	// PodInformers, when set with Informers, is the factory DNS takes every Pod from (its
	// objects slimmed with SlimObjects by its transform); nil makes one of its own. Run
	// starts it with ctx.
	PodInformers informers.SharedInformerFactory
}

// withDefaults fills the zero fields; upstreams come from resolvConf when none are given.
func (c Config) withDefaults(resolvConf string) (Config, error) {
	if c.ListenIP == nil {
		c.ListenIP = DefaultListenIP
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	if c.Log == nil {
		c.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	if len(c.Upstreams) == 0 {
		ups, err := upstreamsFromResolvConf(resolvConf, c.ListenIP)
		if err != nil {
			return c, err
		}
		c.Upstreams = ups
	}
	for _, u := range c.Upstreams {
		host, port, err := net.SplitHostPort(u)
		if err != nil || net.ParseIP(host) == nil {
			return c, fmt.Errorf("upstream %q: want ip:port, such as 192.0.2.53:53 or [2001:db8::53]:53", u)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return c, fmt.Errorf("upstream %q: bad port: %w", u, err)
		}
	}
	return c, nil
}

// upstreamsFromResolvConf returns the nameservers of a resolv.conf as ip:port, leaving out
// self (forwarding to ourselves would loop).
func upstreamsFromResolvConf(path string, self net.IP) ([]string, error) {
	cc, err := mdns.ClientConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("read upstream resolvers from %s: %w (set the upstreams explicitly)", path, err)
	}
	var out []string
	for _, s := range cc.Servers {
		ip := net.ParseIP(s)
		if ip == nil || ip.Equal(self) {
			continue
		}
		out = append(out, net.JoinHostPort(ip.String(), cc.Port))
	}
	return out, nil
}
