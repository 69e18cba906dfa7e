package apiserver

import (
	"context"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/storage"
)

// RepairInterval is how often the ClusterIP and NodePort allocations are checked against the
// Services that exist (upstream's repair loop runs every 3 minutes).
var RepairInterval = 3 * time.Minute

// repairHook runs the allocation repair loop for as long as the API server runs. list returns
// every Service.
func (s *serviceAllocators) repairHook(list func(ctx context.Context) ([]corev1.Service, error)) genericapiserver.PostStartHookFunc {
	return func(hc genericapiserver.PostStartHookContext) error {
		go func() {
			var ipSuspects, portSuspects map[int]bool
			t := time.NewTicker(RepairInterval)
			defer t.Stop()
			for {
				select {
				case <-hc.Done():
					return
				case <-t.C:
				}
				ipSuspects, portSuspects = s.repair(hc, list, ipSuspects, portSuspects)
			}
		}()
		return nil
	}
}

// repair is one pass: it reads the Services, then the allocations. An offset no Service
// holds is released when it was already unheld in the previous pass (so an allocation whose
// Service is being written is never taken away), and an address or port a Service holds but
// the allocation lacks (a restored backup, a crash between writes) is marked taken again.
func (s *serviceAllocators) repair(ctx context.Context, list func(ctx context.Context) ([]corev1.Service, error), ipSuspects, portSuspects map[int]bool) (map[int]bool, map[int]bool) {
	svcs, err := list(ctx)
	if err != nil {
		logrus.WithError(err).Warn("service allocation repair: list Services")
		return ipSuspects, portSuspects
	}
	ips, ports := map[int]bool{}, map[int]bool{}
	for i := range svcs {
		svc := &svcs[i]
		if needsClusterIP(svc) {
			for _, ip := range append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...) {
				if off, ok := s.ipOffset(ip); ok {
					ips[off] = true
				}
			}
		}
		held := []int32{svc.Spec.HealthCheckNodePort}
		for _, p := range svc.Spec.Ports {
			held = append(held, p.NodePort)
		}
		for _, port := range held {
			if port != 0 && int(port) >= s.portMin && int(port) <= s.portMax {
				ports[int(port)-s.portMin] = true
			}
		}
	}
	newIP, err := s.ips.reconcile(ctx, ips, ipSuspects)
	if err != nil {
		logrus.WithError(err).Warn("service allocation repair: ClusterIPs")
		newIP = ipSuspects
	}
	newPort, err := s.ports.reconcile(ctx, ports, portSuspects)
	if err != nil {
		logrus.WithError(err).Warn("service allocation repair: NodePorts")
		newPort = portSuspects
	}
	return newIP, newPort
}

// reconcile makes the allocation agree with inUse: offsets taken but unused that are in
// suspects are released, those newly unused are returned as the next pass's suspects, and
// used offsets missing from the allocation are added.
func (a *rangeAllocator) reconcile(ctx context.Context, inUse, suspects map[int]bool) (map[int]bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var next map[int]bool
	var released, marked []int
	err := a.store.GuaranteedUpdate(ctx, a.key, &corev1.RangeAllocation{}, true, nil,
		storage.SimpleUpdate(func(obj runtime.Object) (runtime.Object, error) {
			ra := obj.(*corev1.RangeAllocation)
			var keep []uint32
			keep, next, released, marked = reconcileOffsets(decodeOffsets(ra.Data), inUse, suspects, a.size)
			ra.Range = a.desc
			ra.Data = encodeOffsets(keep)
			return ra, nil
		}), nil)
	if err != nil {
		return suspects, err
	}
	if len(released) > 0 || len(marked) > 0 {
		logrus.WithFields(logrus.Fields{"range": a.desc, "released": len(released), "marked": len(marked)}).
			Warn("service allocation repair: released leaked values and marked unrecorded ones")
	}
	return next, nil
}

// reconcileOffsets is reconcile's pure part: the offsets to keep (sorted), the next pass's
// suspects, and what was released and marked.
func reconcileOffsets(taken []uint32, inUse, suspects map[int]bool, size int) (keep []uint32, next map[int]bool, released, marked []int) {
	next = map[int]bool{}
	for _, o := range taken {
		switch {
		case inUse[int(o)]:
			keep = append(keep, o)
		case suspects[int(o)]:
			released = append(released, int(o))
		default:
			next[int(o)] = true
			keep = append(keep, o)
		}
	}
	for o := range inUse {
		if o < 0 || o >= size {
			continue
		}
		if i, found := slices.BinarySearch(keep, uint32(o)); !found {
			keep = slices.Insert(keep, i, uint32(o))
			marked = append(marked, o)
		}
	}
	slices.Sort(marked)
	return keep, next, released, marked
}

// listServices reads every Service straight from the store.
func listServices(st interface {
	List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error)
}) func(ctx context.Context) ([]corev1.Service, error) {
	return func(ctx context.Context) ([]corev1.Service, error) {
		obj, err := st.List(ctx, &metainternalversion.ListOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*corev1.ServiceList).Items, nil
	}
}
