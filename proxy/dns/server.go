// Package dns is the cluster DNS server that runs on every host: authoritative for the cluster
// domain (Services, EndpointSlices and Pods from informers, per the Kubernetes DNS-Based Service
// Discovery specification) and a forwarder to the host's resolvers for everything else.
package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Run answers from informers (Services, EndpointSlices, Pods) until ctx ends. It binds its
// sockets before returning any error about the API, so a port or address problem shows at once.
func Run(ctx context.Context, client kubernetes.Interface, cfg Config) error {
	cfg, err := cfg.withDefaults(DefaultResolvConf)
	if err != nil {
		return fmt.Errorf("cluster DNS config: %w", err)
	}
	log := cfg.Log.WithFields(logrus.Fields{"component": "dns", "listen": net.JoinHostPort(cfg.ListenIP.String(), strconv.Itoa(cfg.Port))})
	if len(cfg.Upstreams) == 0 {
		log.Warn("no upstream resolvers: names outside the cluster domain will get SERVFAIL")
	}
	l, err := listen(cfg, log)
	if err != nil {
		return err
	}
	defer l.close()

	// Shared informers serve the host's other components too: a failure here that ends Run
	// must not stop them, so they run on the caller's ctx, not on this one.
	informerStop := ctx.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory := cfg.Informers
	if factory == nil {
		// Nothing else reads this factory's objects, so they may be slimmed. A shared factory
		// keeps them whole: its other users need the fields SlimObjects drops.
		own := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(SlimObjects))
		factory, informerStop = own, ctx.Done()
		defer func() {
			cancel() // the informers stop on ctx; Shutdown waits for them
			own.Shutdown()
		}()
	}
	podFactory := factory
	if cfg.Informers != nil && cfg.PodInformers != nil {
		podFactory = cfg.PodInformers
	} else if cfg.Informers != nil {
		own := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(SlimObjects))
		podFactory = own
		defer func() {
			cancel()
			own.Shutdown()
		}()
	}
	caches, synced, err := InformerCaches(factory, podFactory)
	if err != nil {
		return err
	}
	factory.Start(informerStop)
	podFactory.Start(ctx.Done())
	start := time.Now()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx ended during start-up: a normal stop
	}
	h := NewHandler(cfg, caches)
	log.WithFields(logrus.Fields{"domain": cfg.Domain, "upstreams": cfg.Upstreams, "sync": time.Since(start).Round(time.Millisecond)}).Info("cluster DNS serving")

	udp := &mdns.Server{PacketConn: l.udp, Handler: h}
	tcp := &mdns.Server{Listener: l.tcp, Handler: h, ReadTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }}
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range []*mdns.Server{udp, tcp} {
		g.Go(func() error {
			err := s.ActivateAndServe()
			if err != nil && gctx.Err() == nil {
				return fmt.Errorf("cluster DNS server: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		_ = udp.ShutdownContext(sctx)
		_ = tcp.ShutdownContext(sctx)
		// Closing the sockets also stops a server that had not finished starting when
		// Shutdown was called (it then reports "server not started").
		l.closeSockets()
		return nil
	})
	err = g.Wait()
	log.Info("cluster DNS stopped")
	return err
}

// listeners are the bound sockets and the address Run may have added.
type listeners struct {
	udp        net.PacketConn
	tcp        net.Listener
	removeAddr func()
}

func (l *listeners) closeSockets() {
	if l.udp != nil {
		_ = l.udp.Close()
	}
	if l.tcp != nil {
		_ = l.tcp.Close()
	}
}

func (l *listeners) close() {
	l.closeSockets()
	if l.removeAddr != nil {
		l.removeAddr()
	}
}

// listen makes cfg.ListenIP local and binds UDP and TCP on it, in the calling goroutine's
// network namespace.
func listen(cfg Config, log *logrus.Entry) (*listeners, error) {
	remove, err := ensureLocalAddr(cfg.ListenIP, log)
	if err != nil {
		return nil, err
	}
	l := &listeners{removeAddr: remove}
	addr := net.JoinHostPort(cfg.ListenIP.String(), strconv.Itoa(cfg.Port))
	if l.udp, err = net.ListenPacket("udp", addr); err != nil {
		l.close()
		return nil, fmt.Errorf("cluster DNS: listen on udp %s: %w (another DNS server on this address? stop it or give the cluster DNS another address)", addr, err)
	}
	if l.tcp, err = net.Listen("tcp", addr); err != nil {
		l.close()
		return nil, fmt.Errorf("cluster DNS: listen on tcp %s: %w", addr, err)
	}
	return l, nil
}

// ensureLocalAddr adds ip to the dummy interface InterfaceName (to lo on kernels without the
// dummy driver) unless it is already an address of this network namespace. The returned
// function undoes what was done.
func ensureLocalAddr(ip net.IP, log *logrus.Entry) (func(), error) {
	noop := func() {}
	if ip.IsLoopback() {
		return noop, nil
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("cluster DNS: list local addresses: %w", err)
	}
	for _, a := range addrs {
		if a.IP.Equal(ip) {
			return noop, nil
		}
	}
	link, err := netlink.LinkByName(InterfaceName)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return nil, fmt.Errorf("cluster DNS: look up interface %s: %w", InterfaceName, err)
		}
		err = netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: InterfaceName}})
		switch {
		case errors.Is(err, syscall.EOPNOTSUPP):
			// A kernel built without the dummy driver: an address on lo is just as local.
			log.WithField("interface", "lo").Warn("the kernel has no dummy interfaces; putting the cluster DNS address on lo")
			if link, err = netlink.LinkByName("lo"); err != nil {
				return nil, fmt.Errorf("cluster DNS: look up lo: %w", err)
			}
		case err != nil:
			return nil, fmt.Errorf("cluster DNS: create dummy interface %s: %w (needs CAP_NET_ADMIN)", InterfaceName, err)
		default:
			if link, err = netlink.LinkByName(InterfaceName); err != nil {
				return nil, fmt.Errorf("cluster DNS: look up interface %s: %w", InterfaceName, err)
			}
		}
	}
	name := link.Attrs().Name
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("cluster DNS: bring %s up: %w", name, err)
	}
	bits := 128
	if ip.To4() != nil {
		bits = 32
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}}
	if bits == 128 {
		addr.Flags = ifaFNoDAD // bindable at once, without waiting for duplicate detection
	}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return nil, fmt.Errorf("cluster DNS: add %s to %s: %w", ip, name, err)
	}
	log.WithFields(logrus.Fields{"interface": name, "ip": ip.String()}).Info("added the cluster DNS address")
	return func() {
		if err := netlink.AddrDel(link, addr); err != nil {
			log.WithError(err).Warn("remove the cluster DNS address")
		}
		// The interface is ours by name; drop it once nothing else lives on it.
		if name != InterfaceName {
			return
		}
		if left, err := netlink.AddrList(link, netlink.FAMILY_ALL); err == nil && len(left) == 0 {
			if err := netlink.LinkDel(link); err != nil {
				log.WithError(err).Warn("delete interface " + InterfaceName)
			}
		}
	}, nil
}

// ifaFNoDAD is IFA_F_NODAD from linux/if_addr.h.
const ifaFNoDAD = 0x02
