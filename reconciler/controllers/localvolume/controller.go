// Package localvolume is the dynamic provisioner of the built-in flotilla-local StorageClass:
// for a claim of a class whose provisioner is flotilla.dev/local, once the scheduler has picked
// the consumer's node (annotation volume.kubernetes.io/selected-node), it creates a local
// PersistentVolume pre-bound to the claim and pinned to that node. The volumebinding controller
// then binds the pair; the node agent creates the directory when a pod mounts it.
//
// Each volume carries the label flotilla.dev/local-volume-node=<node> and the finalizer
// flotilla.dev/local-volume-cleanup (package localpv); volumes provisioned before they existed
// get them here. A Released volume of reclaim policy Delete is deleted, and the finalizer keeps
// it, Terminating, until the node agent of its node has removed its directory (only
// <class path>/<volume name>, never a symlink, not while a pod of the node still uses the
// claim) and then the finalizer, as upstream's local static provisioner cleans before it
// deletes. A volume of reclaim policy Retain that is deleted keeps its directory; the agent
// only removes the finalizer. When the volume's Node no longer exists (flotilla host remove),
// no agent can clean it: this controller removes the finalizer and the directory stays on the
// removed host.
package localvolume

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/localvolume/localpv"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
)

// Names of the built-in class and its provisioner.
const (
	// Provisioner is the provisioner name of classes this controller serves.
	Provisioner = localpv.Provisioner
	// ClassName is the StorageClass EnsureDefaultStorageClass creates.
	ClassName = volumebinding.LocalClass
	// DefaultPath is the directory under which volumes live when the class has no "path"
	// parameter.
	DefaultPath = localpv.DefaultPath
	// ParamPath is the StorageClass parameter naming the volumes' parent directory.
	ParamPath = localpv.ParamPath
	// AnnProvisionedBy marks a volume with the provisioner that created it, as upstream.
	AnnProvisionedBy = localpv.AnnProvisionedBy
	// LabelNode names the node of a volume; its node agent watches the volumes so labelled.
	LabelNode = localpv.LabelNode
	// Finalizer holds a deleted volume until its node agent has removed its directory.
	Finalizer = localpv.Finalizer
	// AnnIsDefaultClass marks the default StorageClass.
	AnnIsDefaultClass = "storageclass.kubernetes.io/is-default-class"
)

// Component is the event source of the controller.
const Component = "flotilla-local-provisioner"

const (
	claimPrefix  = "claim:"
	volumePrefix = "volume:"
)

// Options configure the controller.
type Options struct {
	// Path is the "path" parameter of the flotilla-local class the controller creates when it
	// does not exist (--local-volume-path); empty leaves the parameter out (DefaultPath). A
	// class that exists is not changed.
	Path string
}

// Controller provisions local volumes for claims of flotilla.dev/local classes.
type Controller struct {
	opts     Options
	client   kubernetes.Interface
	claims   corelisters.PersistentVolumeClaimLister
	volumes  corelisters.PersistentVolumeLister
	classes  storagelisters.StorageClassLister
	nodes    corelisters.NodeLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *logrus.Entry
}

// New builds the controller with default options and registers its informers on the
// shared factory.
func New(cctx *controllers.Context) (*Controller, error) { return NewWithOptions(cctx, Options{}) }

// NewWithOptions builds the controller and registers its informers on the shared factory.
func NewWithOptions(cctx *controllers.Context, opts Options) (*Controller, error) {
	if opts.Path != "" {
		if _, err := localpv.Root(map[string]string{ParamPath: opts.Path}); err != nil {
			return nil, fmt.Errorf("local volume path: %w", err)
		}
	}
	claimInf := cctx.Informers.Core().V1().PersistentVolumeClaims()
	volumeInf := cctx.Informers.Core().V1().PersistentVolumes()
	classInf := cctx.Informers.Storage().V1().StorageClasses()
	nodeInf := cctx.Informers.Core().V1().Nodes()
	c := &Controller{
		opts:   opts,
		client: cctx.Client, claims: claimInf.Lister(), volumes: volumeInf.Lister(), classes: classInf.Lister(), nodes: nodeInf.Lister(),
		synced: []cache.InformerSynced{claimInf.Informer().HasSynced, volumeInf.Informer().HasSynced, classInf.Informer().HasSynced,
			nodeInf.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "localvolume"}),
		recorder: cctx.Recorder(Component),
		log:      logrus.WithField("controller", "localvolume"),
	}
	if _, err := claimInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.claimChanged,
		UpdateFunc: func(_, cur any) { c.claimChanged(cur) },
		DeleteFunc: c.claimDeleted,
	}); err != nil {
		return nil, fmt.Errorf("persistentvolumeclaim handler: %w", err)
	}
	if _, err := volumeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.volumeChanged,
		UpdateFunc: func(_, cur any) { c.volumeChanged(cur) },
	}); err != nil {
		return nil, fmt.Errorf("persistentvolume handler: %w", err)
	}
	// A claim may name a class created after it.
	if _, err := classInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.classChanged,
		UpdateFunc: func(_, cur any) { c.classChanged(cur) },
	}); err != nil {
		return nil, fmt.Errorf("storageclass handler: %w", err)
	}
	// A removed host leaves its deleted volumes to this controller.
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: c.nodeDeleted,
	}); err != nil {
		return nil, fmt.Errorf("node handler: %w", err)
	}
	return c, nil
}

// Run makes sure the flotilla-local class exists, then provisions until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	// Retry until the API takes it: claims of the class wait for it anyway.
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := EnsureDefaultStorageClass(ctx, c.client, c.opts.Path); err != nil {
			c.log.WithError(err).Warn("ensure default StorageClass, will retry")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil // ctx ended
	}
	return internal.RunWorkers(ctx, "localvolume", c.queue, workers, c.synced, c.sync)
}

// DefaultStorageClass is the flotilla-local class: node-local directories (under dir, or
// DefaultPath when dir is empty), provisioned once a pod using the claim is scheduled,
// deleted with their claim.
func DefaultStorageClass(dir string) *storagev1.StorageClass {
	var params map[string]string
	if dir != "" {
		params = map[string]string{ParamPath: dir}
	}
	return &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        ClassName,
			Annotations: map[string]string{AnnIsDefaultClass: "true"},
		},
		Provisioner:       Provisioner,
		Parameters:        params,
		ReclaimPolicy:     new(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: new(storagev1.VolumeBindingWaitForFirstConsumer),
	}
}

// EnsureDefaultStorageClass creates the flotilla-local StorageClass, its volumes under dir
// ("" for DefaultPath), unless a class of that name exists. An existing class is left as it
// is, so an administrator may change its annotations (for example to make another class the
// default).
func EnsureDefaultStorageClass(ctx context.Context, client kubernetes.Interface, dir string) error {
	classes := client.StorageV1().StorageClasses()
	if _, err := classes.Get(ctx, ClassName, metav1.GetOptions{}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get StorageClass %s: %w", ClassName, err)
	}
	if _, err := classes.Create(ctx, DefaultStorageClass(dir), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create StorageClass %s: %w", ClassName, err)
	}
	logrus.WithField("storageclass", ClassName).Info("created default StorageClass")
	return nil
}

func (c *Controller) sync(ctx context.Context, key string) error {
	switch {
	case strings.HasPrefix(key, claimPrefix):
		return c.syncClaim(ctx, strings.TrimPrefix(key, claimPrefix))
	case strings.HasPrefix(key, volumePrefix):
		return c.syncVolume(ctx, strings.TrimPrefix(key, volumePrefix))
	}
	return nil
}

func (c *Controller) claimChanged(obj any) {
	claim, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || claim.Spec.VolumeName != "" {
		return
	}
	c.queue.Add(claimPrefix + claim.Namespace + "/" + claim.Name)
}

// claimDeleted wakes the volume provisioned for the claim, so it is deleted once released.
func (c *Controller) claimDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if claim, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		c.queue.Add(volumePrefix + VolumeName(claim))
	}
}

func (c *Controller) volumeChanged(obj any) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Annotations[AnnProvisionedBy] != Provisioner {
		return
	}
	c.queue.Add(volumePrefix + pv.Name)
}

func (c *Controller) classChanged(obj any) {
	sc, ok := obj.(*storagev1.StorageClass)
	if !ok || sc.Provisioner != Provisioner {
		return
	}
	claims, _ := c.claims.List(labels.Everything())
	for _, claim := range claims {
		if claim.Spec.VolumeName == "" && volumebinding.ClaimClass(claim) == sc.Name {
			c.claimChanged(claim)
		}
	}
}

// nodeDeleted wakes the volumes of a removed node.
func (c *Controller) nodeDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	pvs, _ := c.volumes.List(labels.SelectorFromSet(labels.Set{LabelNode: node.Name}))
	for _, pv := range pvs {
		c.volumeChanged(pv)
	}
}
