// Package ephemeralvolume carries out generic ephemeral volumes, as upstream's ephemeral
// volume controller does: for each volume of a pod with spec.volumes[].ephemeral it creates
// the PersistentVolumeClaim <pod>-<volume> from the volume's claim template, controlled by
// the pod. The claim is then bound or provisioned as any other (for the default class
// flotilla-local, on the host the pod is scheduled to), and the garbage collector deletes it
// with its pod.
//
// A claim of that name the pod does not control (made by hand, or left by an earlier pod of
// the same name) is never taken: the pod gets a Warning event, the scheduler does not place
// it and the node agent does not mount it.
package ephemeralvolume

import (
	"context"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/internal"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/volumebinding"
)

// Component is the source of the controller's events.
const Component = "ephemeral-volume-controller"

// ReasonFailedBinding is the reason of the Warning event a pod gets when the claim of one of
// its ephemeral volumes cannot be created or is not its own (upstream's).
const ReasonFailedBinding = "FailedBinding"

// claimIndex indexes pods by the claims of their ephemeral volumes ("namespace/claim").
const claimIndex = "ephemeralvolume.claims"

// Controller creates the claims of generic ephemeral volumes. Its queue holds pod keys.
type Controller struct {
	client    kubernetes.Interface
	pods      corelisters.PodLister
	claims    corelisters.PersistentVolumeClaimLister
	podsIndex cache.Indexer
	recorder  record.EventRecorder
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	log       *logrus.Entry
}

// New builds the controller and registers its informers on the shared factory.
func New(cctx *controllers.Context) (controllers.Runner, error) {
	podInformer := cctx.Informers.Core().V1().Pods()
	claimInformer := cctx.Informers.Core().V1().PersistentVolumeClaims()
	c := &Controller{
		client:   cctx.Client,
		pods:     podInformer.Lister(),
		claims:   claimInformer.Lister(),
		recorder: cctx.Recorder(Component),
		synced:   []cache.InformerSynced{podInformer.Informer().HasSynced, claimInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "ephemeralvolume"}),
		log: logrus.WithField("controller", "ephemeralvolume"),
	}
	if err := podInformer.Informer().AddIndexers(cache.Indexers{claimIndex: ephemeralClaimKeys}); err != nil {
		return nil, fmt.Errorf("ephemeralvolume pod index: %w", err)
	}
	c.podsIndex = podInformer.Informer().GetIndexer()
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueuePod,
		UpdateFunc: func(_, obj any) { c.enqueuePod(obj) },
	}); err != nil {
		return nil, fmt.Errorf("ephemeralvolume pod handler: %w", err)
	}
	// A claim deleted under a pod that still needs it is made again; a claim that was not
	// the pod's, once gone, lets the pod have its own.
	if _, err := claimInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: c.enqueuePodsOfClaim,
	}); err != nil {
		return nil, fmt.Errorf("ephemeralvolume claim handler: %w", err)
	}
	return c, nil
}

// Run processes pods with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return internal.RunWorkers(ctx, "ephemeralvolume", c.queue, workers, c.synced, c.sync)
}

// needsClaims reports whether pod has an ephemeral volume whose claim it may still need: it
// is not being deleted and has not finished.
func needsClaims(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Ephemeral != nil {
			return true
		}
	}
	return false
}

func (c *Controller) enqueuePod(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok && needsClaims(pod) {
		internal.Enqueue(c.queue, pod)
	}
}

// enqueuePodsOfClaim queues the pods whose ephemeral volume names the deleted claim.
func (c *Controller) enqueuePodsOfClaim(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	claim, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	objs, err := c.podsIndex.ByIndex(claimIndex, claim.Namespace+"/"+claim.Name)
	if err != nil {
		return
	}
	for _, o := range objs {
		c.enqueuePod(o)
	}
}

// ephemeralClaimKeys is the index function of claimIndex.
func ephemeralClaimKeys(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var keys []string
	for i := range pod.Spec.Volumes {
		if v := &pod.Spec.Volumes[i]; v.Ephemeral != nil {
			keys = append(keys, pod.Namespace+"/"+volumebinding.EphemeralClaimName(pod, v))
		}
	}
	return keys, nil
}

// sync creates the missing claims of the ephemeral volumes of the pod of key.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if !needsClaims(pod) {
		return nil
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Ephemeral == nil {
			continue
		}
		err := c.ensureClaim(ctx, pod, v)
		if err == nil {
			continue
		}
		c.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonFailedBinding, "ephemeral volume %s: %v", v.Name, err)
		if errors.As(err, new(notOwned)) {
			continue // the claim's deletion queues the pod again
		}
		return err
	}
	return nil
}

// notOwned is the error about a claim the pod does not control: trying again cannot help
// until the claim is gone.
type notOwned struct{ error }

// isForPod is volumebinding.EphemeralClaimIsForPod, its error a notOwned.
func isForPod(pod *corev1.Pod, claim *corev1.PersistentVolumeClaim) error {
	if err := volumebinding.EphemeralClaimIsForPod(pod, claim); err != nil {
		return notOwned{err}
	}
	return nil
}

// ensureClaim creates the claim of the ephemeral volume v of pod, unless it exists. A claim of
// that name the pod does not control is an error.
func (c *Controller) ensureClaim(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) error {
	name := volumebinding.EphemeralClaimName(pod, v)
	existing, err := c.claims.PersistentVolumeClaims(pod.Namespace).Get(name)
	switch {
	case err == nil:
		return isForPod(pod, existing)
	case !apierrors.IsNotFound(err):
		return err
	}
	tmpl := v.Ephemeral.VolumeClaimTemplate
	if tmpl == nil {
		return fmt.Errorf("no volumeClaimTemplate") // the API refuses such a pod
	}
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   pod.Namespace,
			Labels:      tmpl.Labels,
			Annotations: tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	created, err := c.client.CoreV1().PersistentVolumeClaims(pod.Namespace).Create(ctx, claim, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Made a moment ago (by this controller, or by someone else): the next event of the
		// claim tells whose it is.
		current, gerr := c.client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		return isForPod(pod, current)
	}
	if err != nil {
		return fmt.Errorf("create PersistentVolumeClaim %s: %w", name, err)
	}
	c.log.WithField("pod", pod.Namespace+"/"+pod.Name).WithField("claim", created.Name).Info("created the claim of an ephemeral volume")
	return nil
}
