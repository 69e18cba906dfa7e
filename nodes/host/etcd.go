package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/google/renameio/v2"
	"github.com/sirupsen/logrus"
	"go.uber.org/zap"

	"github.com/flotilla-dev/flotilla/internal/logging"

	"github.com/flotilla-dev/flotilla/nodes/membership"
	"github.com/flotilla-dev/flotilla/reconciler/etcd"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// startMembership starts gossip and, on a host that is new to the site, asks the site to let
// it in: it receives the CA, the admin token and its place in etcd.
func (h *Host) startMembership() error {
	c := h.cfg
	gcfg := membership.DefaultConfig()
	gcfg.Name, gcfg.BindAddr, gcfg.BindPort, gcfg.AdvertiseAddr = c.Name, h.etcdHost, c.GossipPort, c.AdvertiseAddress
	gcfg.Token, gcfg.Key = h.token.Secret, h.token.GossipKey
	gcfg.Meta = membership.Meta{Roles: []string{"host"}}
	gossip, err := membership.New(gcfg)
	if err != nil {
		return err
	}
	h.gossip = gossip
	h.dead = etcd.NewDeadTracker()
	go h.trackDead()
	// Partitions longer than memberlist's 30 s of gossip to the dead need this to heal.
	go gossip.Reconnect(5*time.Second, 24*time.Hour, h.runCtx.Done())

	h.lifecycle = &etcd.Lifecycle{
		Name: c.Name, EtcdDir: filepath.Join(h.dataDir, "etcd"),
		PeerURL: h.peerURL.String(), ClientURL: h.clientURL.String(),
		Token: h.token, Voters: c.EtcdVoters, Peers: h.peers,
		Dial: func(urls []string) (etcd.Cluster, error) {
			cli, err := etcd.NewClient(urls, h.ca.CertFile(), h.certs.etcdClientCert, h.certs.etcdClientKey)
			if err != nil {
				return nil, err
			}
			return cli, nil
		},
		Log: logrus.WithFields(logrus.Fields{"host": c.Name, "component": "etcd"}),
	}
	if h.bootstrap {
		if h.state == nil {
			h.state = &etcd.ClusterState{Member: true}
		}
		return nil
	}
	seeds := c.Join
	if h.state != nil {
		// A host that has joined before also tries the hosts it last saw alive: its --join
		// hosts may be down or gone.
		seeds = mergeSeeds(c.Join, loadGossipPeers(h.gossipPeersPath()))
	}
	go h.rememberGossipPeers(5 * time.Second)
	go func() {
		_, err := gossip.Join(seeds, h.runCtx.Done())
		h.joinErr <- err
	}()
	if h.state != nil {
		return nil
	}
	if err := <-h.joinErr; err != nil {
		return err
	}
	if !c.Etcd {
		return h.joinAsWorker()
	}
	resp, err := h.lifecycle.JoinSite(h.runCtx, true)
	if err != nil {
		return err
	}
	if h.ca, err = pki.InstallCA(filepath.Join(h.dataDir, "pki"), resp.CACert, resp.CAKey); err != nil {
		return err
	}
	if err := os.WriteFile(h.adminPath, []byte(resp.AdminToken+"\n"), 0o600); err != nil {
		return err
	}
	h.state = &etcd.ClusterState{Member: resp.Member, ClientURLs: resp.ClientURLs, PeerURL: h.peerURL.String()}
	h.initialCluster = resp.InitialCluster
	h.log.WithFields(logrus.Fields{"member": resp.Member, "initialCluster": h.initialCluster}).Info("joined the site")
	return nil
}

// peers is gossip's view of the site, for the voter lifecycle.
func (h *Host) peers() []etcd.Peer {
	members := h.gossip.Members()
	out := make([]etcd.Peer, 0, len(members))
	for _, m := range members {
		out = append(out, etcd.Peer{Name: m.Name, Alive: m.State == membership.Alive, APIURL: m.Meta.APIURL, EtcdClientURL: m.Meta.EtcdClientURL})
	}
	return out
}

// aliveNames lists the hosts gossip sees alive that may hold etcd: those serving the API
// (a worker, --etcd=false, publishes no API URL and can never take a voter's place).
func (h *Host) aliveNames() []string {
	var names []string
	for _, p := range h.peers() {
		if p.Alive && p.APIURL != "" {
			names = append(names, p.Name)
		}
	}
	return names
}

func (h *Host) gossipPeersPath() string { return filepath.Join(h.dataDir, "gossip-peers.json") }

// loadGossipPeers reads the gossip addresses rememberGossipPeers wrote (none if unreadable).
func loadGossipPeers(path string) []string {
	var addrs []string
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &addrs)
	}
	return addrs
}

// mergeSeeds is join followed by the remembered addresses it lacks.
func mergeSeeds(join, remembered []string) []string {
	out := slices.Clone(join)
	for _, a := range remembered {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// rememberGossipPeers writes, every interval while it changes, the gossip addresses of the
// other hosts gossip sees alive, for the next start.
func (h *Host) rememberGossipPeers(interval time.Duration) {
	var last []string
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-h.runCtx.Done():
			return
		case <-t.C:
		}
		var addrs []string
		for _, m := range h.gossip.Members() {
			if m.Name != h.cfg.Name && m.State == membership.Alive {
				addrs = append(addrs, membership.HostPort(m.Addr, m.Port))
			}
		}
		sort.Strings(addrs)
		if len(addrs) == 0 || slices.Equal(addrs, last) {
			continue
		}
		b, _ := json.Marshal(addrs)
		if err := renameio.WriteFile(h.gossipPeersPath(), b, 0o600); err != nil {
			h.log.WithError(err).Warn("remember the gossip peers")
			continue
		}
		last = addrs
	}
}

// removedHosts lists the hosts removed from the site and not readmitted.
func (h *Host) removedHosts() []string {
	if h.revoked == nil {
		return nil
	}
	var out []string
	for name := range h.revoked.Current() {
		if h.revoked.Banned(name) {
			out = append(out, name)
		}
	}
	return out
}

func (h *Host) trackDead() {
	for {
		select {
		case <-h.runCtx.Done():
			return
		case ev := <-h.gossip.Events():
			dead := ev.Member.State == membership.Dead || ev.Member.State == membership.Left
			h.dead.Observe(ev.Member.Name, dead, time.Now())
		}
	}
}

// gossipJoined waits up to timeout for the gossip join started at boot.
func (h *Host) gossipJoined(timeout time.Duration) error {
	select {
	case err := <-h.joinErr:
		h.joinErr <- err // later waiters see it too
		return err
	case <-time.After(timeout):
		return fmt.Errorf("gossip join not done after %s", timeout)
	case <-h.runCtx.Done():
		return h.runCtx.Err()
	}
}

func (h *Host) etcdConfig() etcd.Config {
	return etcd.Config{
		Name: h.cfg.Name, DataDir: filepath.Join(h.dataDir, "etcd"),
		ClientURL: h.clientURL, PeerURL: h.peerURL, InitialCluster: h.initialCluster,
		CAFile: h.ca.CertFile(), ServerCert: h.certs.etcdServerCert, ServerKey: h.certs.etcdServerKey,
		PeerCert: h.certs.etcdPeerCert, PeerKey: h.certs.etcdPeerKey, ReadyTimeout: 2 * time.Minute,
		Logger: etcdLogger(h.cfg.Name),
	}
}

// startEtcd issues the certificates, prepares a restarted host (see etcd.PlanRestart),
// starts the member when this host is a voter and connects the client.
func (h *Host) startEtcd() error {
	if h.initialCluster == "" && !h.bootstrap {
		if err := h.lifecycle.Restart(h.runCtx, h.state, h.gossipJoined); err != nil {
			return err
		}
	}
	h.state.PeerURL = h.peerURL.String()
	servers := h.state.ClientURLs
	if h.state.Member {
		cfg := h.etcdConfig()
		if h.resume {
			// The pods run already; the member waits for a quorum however long the host is
			// cut off.
			cfg.ReadyTimeout = -1
			h.log.Info("etcd member starting: it serves once a quorum of voters is reachable")
		}
		m, err := etcd.Start(h.runCtx, cfg)
		if errors.Is(err, etcd.ErrStopped) {
			// Removed while away, and the check before the start could not tell (gossip or
			// the other hosts' etcd too slow to answer): the member learnt it from a peer.
			removed, aerr := h.lifecycle.SetAsideIfRemoved(h.runCtx, h.state, h.gossipJoined)
			if aerr != nil {
				return aerr
			}
			if !removed {
				return err
			}
			servers = h.state.ClientURLs
		} else if err != nil {
			return err
		} else {
			h.member = m
			servers = m.ClientURLs()
			h.log.WithField("clientURLs", servers).Info("etcd member ready")
		}
	}
	if err := h.state.Save(h.statePath); err != nil {
		return err
	}
	cli, err := etcd.NewClient(servers, h.ca.CertFile(), h.certs.etcdClientCert, h.certs.etcdClientKey)
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	h.etcdClient = cli
	if h.member != nil {
		ctx, cancel := context.WithTimeout(h.runCtx, 3*time.Minute)
		defer cancel()
		if err := h.member.WaitVoter(ctx, cli); err != nil {
			return err
		}
	}
	return h.checkStorageFormat()
}

// runEtcdMembership keeps the site's etcd membership in shape from a voter, or waits as a
// standby until the site lacks a voter and then becomes one.
func (h *Host) runEtcdMembership() {
	reconcile := func() {
		rec := &etcd.Reconciler{Client: h.etcdClient, Endpoint: h.clientURL.String(), DeadSince: h.dead.Since,
			ReplaceAfter: h.cfg.VoterReplaceAfter, Alive: h.aliveNames, Removed: h.removedHosts}
		go rec.Run(h.runCtx)
	}
	if h.state.Member {
		reconcile()
		return
	}
	go func() {
		m, err := h.lifecycle.Standby(h.runCtx, h.etcdClient,
			func(ctx context.Context, initialCluster string) (*etcd.Member, error) {
				cfg := h.etcdConfig()
				cfg.InitialCluster = initialCluster
				return etcd.Start(ctx, cfg)
			},
			func(ctx context.Context, m *etcd.Member) error { return m.WaitVoter(ctx, h.etcdClient) })
		if err != nil {
			if h.runCtx.Err() == nil {
				h.log.WithError(err).Error("standby could not become an etcd voter")
			}
			return
		}
		h.state.Member = true
		if err := h.state.Save(h.statePath); err != nil {
			h.log.WithError(err).Error("save cluster state")
		}
		h.meta.Roles = append(h.meta.Roles, "etcd")
		h.meta.EtcdClientURL, h.meta.EtcdPeerURL = h.clientURL.String(), h.peerURL.String()
		_ = h.gossip.UpdateMeta(h.meta)
		reconcile()
		h.promoted <- m
	}()
}

// etcdLogger routes the embedded member's logs into the host's log stream: warnings and
// errors always, its chatty info lines only at --log-level debug.
func etcdLogger(host string) *zap.Logger {
	return logging.ZapAtLeast("etcd", logrus.WarnLevel).With(zap.String("host", host))
}
