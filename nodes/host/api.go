package host

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/gitsync"
	"github.com/flotilla-dev/flotilla/internal/kubeclient"
	"github.com/flotilla-dev/flotilla/internal/logging"
	"github.com/flotilla-dev/flotilla/nodes/membership"
	"github.com/flotilla-dev/flotilla/policies"
	"github.com/flotilla-dev/flotilla/proxy/dns"
	"github.com/flotilla-dev/flotilla/proxy/ingress"
	"github.com/flotilla-dev/flotilla/reconciler/apiserver"
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/etcd"
	"github.com/flotilla-dev/flotilla/reconciler/hostaccess"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

// startAPI serves the Kubernetes API (with the join endpoint and git push webhooks in front
// of authentication, as they authenticate themselves), waits until it is ready, starts the
// webhook listener (--webhook-port), writes the admin kubeconfig and publishes the host's
// URLs in gossip.
func (h *Host) startAPI() error {
	c := h.cfg
	joinClient, err := kubernetes.NewForConfig(h.ids.join)
	if err != nil {
		return err
	}
	joinServer := &etcd.JoinServer{CA: h.ca, Token: h.token, AdminToken: h.adminToken, Client: h.etcdClient, Voters: c.EtcdVoters,
		SignWorker: h.signWorker, Policy: &hostaccess.Policy{Client: joinClient, Initial: h.token.Secret}}
	// One handler for the API port and the webhook port: one replay memory and one rate
	// limit per host.
	gitHook := gitsync.NewWebhook()
	// The storage's etcd clients retry through every blip of a member; their warnings are
	// noise, their errors are not.
	apiserver.SetStorageEtcdClientLogger(logging.ZapAtLeast("etcd-client", logrus.ErrorLevel))
	saKey, redactionKey, err := h.siteKeys()
	if err != nil {
		return err
	}
	caKey, err := h.ca.KeyPEM()
	if err != nil {
		return fmt.Errorf("site CA key: %w", err)
	}
	secretsKey, err := secretsEncryptionKey(caKey)
	if err != nil {
		return err
	}
	policySet, err := policies.Library(c.Policies)
	if err != nil {
		return err
	}
	server, err := apiserver.New(apiserver.Config{
		BindAddress:      h.listen,
		Port:             c.APIPort,
		AdvertiseAddress: h.advertise,
		ServingCertFile:  h.certs.apiCert, ServingKeyFile: h.certs.apiKey,
		Etcd: apiserver.EtcdClientConfig{
			Servers: h.etcdClient.Endpoints(), CAFile: h.ca.CertFile(), CertFile: h.certs.etcdClientCert, KeyFile: h.certs.etcdClientKey,
		},
		Tokens: map[string]*user.DefaultInfo{
			h.adminToken: {Name: "admin", UID: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
		},
		ClientCAFile:             h.ca.CertFile(),
		ServiceAccountKey:        saKey,
		MaxTokenLifetime:         c.ServiceAccountMaxTokenTTL,
		RedactionKey:             redactionKey,
		Validation:               h.vopts,
		DefaultTolerationSeconds: c.DefaultTolerationSeconds,
		PodSecurityDefault:       c.PodSecurityDefault,
		Policies:                 policySet,
		Unauthenticated:          map[string]http.Handler{etcd.CACertsPath: joinServer, etcd.JoinPath: joinServer, gitsync.WebhookPathPrefix: gitHook},
		Nodes:                    apiserver.NodeConnection{CAFile: h.ca.CertFile(), CertFile: h.certs.nodeClientCert, KeyFile: h.certs.nodeClientKey},
		Audit: apiserver.AuditConfig{Path: c.AuditLogPath, MaxSizeMB: c.AuditLogMaxSize, MaxBackups: c.AuditLogMaxBackup,
			PolicyFile: c.AuditPolicyFile},
		SecretsEncryptionKey:         secretsKey,
		EncryptionProviderConfigFile: c.EncryptionProviderConfig,
	})
	if err != nil {
		return err
	}
	h.server = server
	start := time.Now()
	go func() {
		h.apiErr = server.Run(h.runCtx)
		close(h.apiStopped)
	}()
	if h.apiClient, err = kubeclient.New(server.Loopback); err != nil {
		return err
	}
	if err := h.waitReady(); err != nil {
		return err
	}
	if err := gitHook.SetConfig(h.ids.gitWebhook); err != nil {
		return err
	}
	if err := h.startWebhook(gitHook); err != nil {
		return err
	}
	if err := writeKubeconfig(h.Kubeconfig(), h.apiURL, h.ca.CertPEM, h.adminToken); err != nil {
		return err
	}
	h.meta = membership.Meta{Roles: []string{"host"}, APIURL: h.apiURL, LabelsHash: labelsHash(c.NodeLabels)}
	if h.state.Member {
		h.meta.Roles = append(h.meta.Roles, "etcd")
		h.meta.EtcdClientURL, h.meta.EtcdPeerURL = h.clientURL.String(), h.peerURL.String()
	}
	if err := h.gossip.UpdateMeta(h.meta); err != nil {
		h.log.WithError(err).Warn("publish gossip metadata")
	}
	h.log.WithFields(logrus.Fields{"kubeconfig": h.Kubeconfig(), "startup": time.Since(start).Round(time.Millisecond)}).Info("API ready")
	return nil
}

// secretsEncryptionKey derives from the site CA's key (PEM) the key that encrypts Secrets in
// etcd (apiserver.SecretsKeyName): the same on every host that holds the CA. Changing the
// derivation makes every stored Secret unreadable.
func secretsEncryptionKey(caKeyPEM []byte) ([]byte, error) {
	return hkdf.Key(sha256.New, caKeyPEM, nil, "flotilla secrets encryption v1", 32)
}

// waitReady polls /readyz until the API server answers ok: for two minutes on a new host,
// for as long as it takes on a host that resumed from its checkpoint (its etcd may wait
// for a quorum of voters while the host serves from what it had).
func (h *Host) waitReady() error {
	ctx := h.runCtx
	if !h.resume {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-h.apiStopped:
			return false, fmt.Errorf("API server stopped before it was ready: %w", h.apiErr)
		default:
		}
		body, err := h.apiClient.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
}

// startSite runs what every host keeps up for the site: the `kubernetes` Service, the etcd
// membership, and the GitSource of --git-url (with the webhook token of
// --git-webhook-secret-file).
func (h *Host) startSite() error {
	go runKubernetesService(h.runCtx, h.apiClient, firstIP(h.vopts.ServiceCIDR), int32(h.cfg.APIPort), h.cfg.Name)
	go h.retry("label this server's Node "+ControlPlaneLabel, func(ctx context.Context) error {
		return labelControlPlane(ctx, h.apiClient, h.cfg.Name)
	})
	if h.cfg.Proxy {
		go h.retry("ensure Service kube-system/kube-dns", func(ctx context.Context) error {
			return dns.EnsureService(ctx, h.apiClient, net.ParseIP(h.cfg.ClusterDNS))
		})
		go h.retry("ensure IngressClass flotilla", func(ctx context.Context) error { return ingress.EnsureClass(ctx, h.apiClient) })
	}
	// The hosts removed from the site: gossip ignores them, the etcd leader removes their
	// membership (the API servers refuse their certificates on their own).
	h.revoked = hostaccess.NewRevocations(h.apiClient, pki.SignBackdate)
	h.gossip.SetBanned(h.revoked.Banned)
	go h.revoked.Run(h.runCtx.Done())
	h.runEtcdMembership()
	if err := h.ensureSite(); err != nil {
		return err
	}
	if h.cfg.GitURL == "" {
		return nil
	}
	dyn, err := dynamic.NewForConfig(h.server.Loopback)
	if err != nil {
		return fmt.Errorf("git source client: %w", err)
	}
	var webhookToken []byte
	if h.cfg.GitWebhookSecretFile != "" {
		if webhookToken, err = readWebhookToken(h.cfg.GitWebhookSecretFile); err != nil {
			return err
		}
	}
	go func() {
		c := h.cfg
		_ = wait.PollUntilContextCancel(h.runCtx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := gitsync.EnsureRootSourceWith(ctx, dyn, c.GitURL, c.GitRef, c.GitPath, gitsync.RootOptions{
				RolloutAfter: c.GitRolloutAfter, RolloutSoak: c.GitRolloutSoak, StatusPush: c.GitStatusPush, StatusInterval: c.GitStatusInterval, Insecure: c.GitInsecure, Interval: c.GitInterval,
				RollbackHealthTimeout: c.GitRollbackHealthTimeout}); err != nil {
				h.log.WithError(err).Warn("record GitSource kube-system/root")
				return false, nil
			}
			if webhookToken != nil {
				if err := gitsync.EnsureRootWebhook(ctx, h.apiClient, dyn, webhookToken); err != nil {
					h.log.WithError(err).Warn("record the webhook token of GitSource kube-system/root (--git-webhook-secret-file)")
					return false, nil
				}
			}
			h.log.WithFields(logrus.Fields{"url": c.GitURL, "ref": c.GitRef, "path": c.GitPath}).Info("GitSource kube-system/root recorded")
			return true, nil
		})
	}()
	return nil
}

// startControllers runs the controllers while this host leads their election (on an etcd
// lease, recorded in the Lease kube-system/flotilla-controllers). The scheduler has an
// election of its own, so it can move independently of the controllers.
func (h *Host) startControllers() error {
	enabled, err := SelectControllers(h.cfg.Controllers, h.cfg)
	if err != nil {
		return err
	}
	groups := map[string][]controllers.Named{}
	for _, c := range enabled {
		lease := "flotilla-controllers"
		if c.Name == "scheduler" {
			lease = "flotilla-scheduler"
		}
		groups[lease] = append(groups[lease], c)
		if c.Name == "gitsync" {
			// While another host leads, keep gitsync's clones warm for the day this one does.
			go func() {
				_ = gitsync.RunWarm(h.runCtx, h.ids.controller("gitsync"), gitsync.WarmConfig{CacheDir: filepath.Join(h.dataDir, "git"), Identity: h.cfg.Name, Lease: "flotilla-controllers", Limits: h.cfg.GitLimits})
			}()
		}
	}
	kube, err := kubeclient.New(h.ids.controllerManager)
	if err != nil {
		return err
	}
	for lease, list := range groups {
		go func() {
			_ = controllers.RunWhileLeader(h.runCtx, h.etcdClient, kube, lease, h.cfg.Name, controllers.LeaderConfig{},
				func(ctx context.Context) {
					if err := controllers.RunControllers(ctx, h.ids.controllerManager, list, func(c *controllers.Context) {
						c.ConfigFor = h.ids.controller
						c.RootCA = h.ca.CertPEM
						c.CA = h.ca
						c.HostDeadSince = func(name string) (time.Time, bool) {
							since, dead := h.dead.Since()[name]
							return since, dead
						}
						c.HostAlive = h.gossip.Alive
					}); err != nil {
						h.log.WithError(err).WithField("lease", lease).Error("controllers")
					}
				})
		}()
	}
	return nil
}
