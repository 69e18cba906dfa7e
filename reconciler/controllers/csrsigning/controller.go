// Package csrsigning is the CertificateSigningRequest signer, as kube-controller-manager's
// csrsigning run with the cluster CA: approved requests of the signers
// kubernetes.io/kube-apiserver-client, kubernetes.io/kube-apiserver-client-kubelet and
// kubernetes.io/kubelet-serving are issued a certificate by the site CA, in
// status.certificate. A request that breaks its signer's rules gets condition Failed
// (reason SignerValidationFailure) instead. Requests of other signers are left to them.
package csrsigning

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
	"github.com/flotilla-dev/flotilla/reconciler/pki"
)

const (
	// DefaultDuration is the longest validity of a certificate when none is configured:
	// 30 days, shorter than upstream's year, so that edge hosts rotate often.
	DefaultDuration = 30 * 24 * time.Hour
	// MinDuration is the shortest validity issued, whatever spec.expirationSeconds asks
	// (upstream's lower bound, twice the backdating).
	MinDuration = 10 * time.Minute
	// ReasonSignerValidationFailure is the reason of the Failed condition of a request that
	// breaks its signer's rules, as upstream.
	ReasonSignerValidationFailure = "SignerValidationFailure"
)

// Config tunes the signer.
type Config struct {
	// Duration is the longest validity of a certificate (--cluster-signing-duration):
	// spec.expirationSeconds may ask for less, not more.
	Duration time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{Duration: DefaultDuration} }

// Controller is the signer. Its queue holds request names.
type Controller struct {
	client   kubernetes.Interface
	ca       *pki.CA
	duration time.Duration
	lister   certlisters.CertificateSigningRequestLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	log      *logrus.Entry
	now      func() time.Time
}

// New builds the signer with the default configuration.
func New(c *controllers.Context) (controllers.Runner, error) {
	return NewWithConfig(c, DefaultConfig())
}

// NewWithConfig builds the signer, which signs with c.CA, and registers its informer on the
// shared factory.
func NewWithConfig(c *controllers.Context, cfg Config) (*Controller, error) {
	if c.CA == nil {
		return nil, errors.New("csrsigning: no site CA to sign with")
	}
	if cfg.Duration < MinDuration {
		return nil, fmt.Errorf("csrsigning: signing duration %s is shorter than %s", cfg.Duration, MinDuration)
	}
	inf := c.Informers.Certificates().V1().CertificateSigningRequests()
	ctl := &Controller{
		client:   c.Client,
		ca:       c.CA,
		duration: cfg.Duration,
		lister:   inf.Lister(),
		synced:   []cache.InformerSynced{inf.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csrsigning"}),
		log: logrus.WithField("controller", "csrsigning"),
		now: time.Now,
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { internal.Enqueue(ctl.queue, obj) },
		UpdateFunc: func(_, cur any) { internal.Enqueue(ctl.queue, cur) },
	}); err != nil {
		return nil, fmt.Errorf("csrsigning: handler: %w", err)
	}
	return ctl, nil
}

// Run signs requests with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "csrsigning", c.queue, workers, c.synced, c.sync)
}

// Signers are the signer names this controller issues certificates for.
var Signers = []string{
	certificatesv1.KubeAPIServerClientSignerName,
	certificatesv1.KubeAPIServerClientKubeletSignerName,
	certificatesv1.KubeletServingSignerName,
}
