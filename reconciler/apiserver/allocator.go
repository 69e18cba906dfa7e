package apiserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
)

// rangeAllocator hands out the offsets of a range (ClusterIPs, NodePorts). Its state lives in
// etcd as a RangeAllocation whose data is the sorted list of taken offsets, updated with
// compare-and-swap, so every API server of the site shares it and nothing is kept in memory.
type rangeAllocator struct {
	store storage.Interface
	key   string
	desc  string
	size  int
	// static is the size of the lower band kept for requested values; automatic allocation
	// uses the upper band first (spec: ClusterIP allocation, static/dynamic split).
	static int
	// mu serialises this server's updates so they do not conflict with each other; other
	// hosts' updates are still resolved by etcd's compare-and-swap.
	mu sync.Mutex
}

func newRangeAllocator(optsGetter generic.RESTOptionsGetter, resource, desc string, size, static int) (*rangeAllocator, error) {
	opts, err := optsGetter.GetRESTOptions(corev1.Resource(resource), &corev1.RangeAllocation{})
	if err != nil {
		return nil, err
	}
	newFunc := func() runtime.Object { return &corev1.RangeAllocation{} }
	raw := generic.NewRawStorage
	if g, ok := optsGetter.(rawStorageGetter); ok {
		raw = g.rawStorage
	}
	st, _, err := raw(opts.StorageConfig, newFunc, newFunc, "/ranges")
	if err != nil {
		return nil, fmt.Errorf("storage for %s: %w", resource, err)
	}
	return &rangeAllocator{store: st, key: "/ranges/" + resource, desc: desc, size: size, static: static}, nil
}

func decodeOffsets(b []byte) []uint32 {
	out := make([]uint32, 0, len(b)/4)
	for i := 0; i+4 <= len(b); i += 4 {
		out = append(out, binary.BigEndian.Uint32(b[i:]))
	}
	return out
}

func encodeOffsets(list []uint32) []byte {
	b := make([]byte, 4*len(list))
	for i, v := range list {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	return b
}

var errTaken = fmt.Errorf("already allocated")

// allocate takes want (or, with want < 0, a free offset) and returns it. With dryRun nothing
// is written.
func (a *rangeAllocator) allocate(ctx context.Context, want int, dryRun bool) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	got := -1
	err := a.store.GuaranteedUpdate(ctx, a.key, &corev1.RangeAllocation{}, true, nil,
		storage.SimpleUpdate(func(obj runtime.Object) (runtime.Object, error) {
			ra := obj.(*corev1.RangeAllocation)
			taken := decodeOffsets(ra.Data)
			if want >= 0 {
				if _, found := slices.BinarySearch(taken, uint32(want)); found {
					return nil, errTaken
				}
				got = want
			} else {
				got = a.pickFree(taken)
				if got < 0 {
					return nil, fmt.Errorf("no free %s left: all %d are allocated", a.desc, a.size)
				}
			}
			if dryRun {
				return nil, errDryRunDone
			}
			i, _ := slices.BinarySearch(taken, uint32(got))
			taken = slices.Insert(taken, i, uint32(got))
			ra.Range = a.desc
			ra.Data = encodeOffsets(taken)
			return ra, nil
		}), nil)
	if err == errDryRunDone {
		return got, nil
	}
	return got, err
}

var errDryRunDone = fmt.Errorf("dry run")

// pickFree returns a free offset: random within the dynamic (upper) band, then the static
// band; -1 when the range is full.
func (a *rangeAllocator) pickFree(taken []uint32) int {
	isFree := func(o int) bool {
		_, found := slices.BinarySearch(taken, uint32(o))
		return !found
	}
	scan := func(lo, hi int) int {
		if hi <= lo {
			return -1
		}
		start := lo + rand.IntN(hi-lo)
		for i := 0; i < hi-lo; i++ {
			o := lo + (start-lo+i)%(hi-lo)
			if isFree(o) {
				return o
			}
		}
		return -1
	}
	if o := scan(a.static, a.size); o >= 0 {
		return o
	}
	return scan(0, a.static)
}

func (a *rangeAllocator) release(ctx context.Context, offset int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.store.GuaranteedUpdate(ctx, a.key, &corev1.RangeAllocation{}, true, nil,
		storage.SimpleUpdate(func(obj runtime.Object) (runtime.Object, error) {
			ra := obj.(*corev1.RangeAllocation)
			taken := decodeOffsets(ra.Data)
			i, found := slices.BinarySearch(taken, uint32(offset))
			if !found {
				return ra, nil
			}
			ra.Data = encodeOffsets(slices.Delete(taken, i, i+1))
			return ra, nil
		}), nil)
}

// serviceAllocators allocate ClusterIPs and NodePorts for Services.
type serviceAllocators struct {
	cidr             netip.Prefix
	ips              *rangeAllocator
	portMin, portMax int
	ports            *rangeAllocator
}

func newServiceAllocators(optsGetter generic.RESTOptionsGetter, cidr netip.Prefix, portMin, portMax int32) (*serviceAllocators, error) {
	bits := 32 - cidr.Bits()
	if bits > 24 {
		bits = 24 // at most 16M addresses are tracked
	}
	// Usable offsets: 1 .. size-2 of the range (network and broadcast excluded); offset 0 of
	// the allocator is the range's first usable address.
	size := (1 << bits) - 2
	static := min(max(16, size/16), 256)
	ips, err := newRangeAllocator(optsGetter, "serviceipallocations", "service IPs in "+cidr.String(), size, static)
	if err != nil {
		return nil, err
	}
	n := int(portMax-portMin) + 1
	ports, err := newRangeAllocator(optsGetter, "servicenodeportallocations", fmt.Sprintf("node ports in %d-%d", portMin, portMax), n, min(max(16, n/16), 128))
	if err != nil {
		return nil, err
	}
	return &serviceAllocators{cidr: cidr.Masked(), ips: ips, portMin: int(portMin), portMax: int(portMax), ports: ports}, nil
}

func (s *serviceAllocators) ipOffset(ip string) (int, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() || !s.cidr.Contains(a) {
		return 0, false
	}
	base := binary.BigEndian.Uint32(s.cidr.Addr().AsSlice())
	v := binary.BigEndian.Uint32(a.AsSlice())
	off := int(v-base) - 1
	if off < 0 || off >= s.ips.size {
		return 0, false
	}
	return off, true
}

func (s *serviceAllocators) ipAt(off int) string {
	base := binary.BigEndian.Uint32(s.cidr.Addr().AsSlice())
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], base+uint32(off)+1)
	return netip.AddrFrom4(b).String()
}

func needsClusterIP(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != corev1.ClusterIPNone
}

func needsNodePorts(svc *corev1.Service) bool {
	if svc.Spec.Type == corev1.ServiceTypeNodePort {
		return true
	}
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		(svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts)
}

// needsHealthCheck: a LoadBalancer Service with externalTrafficPolicy Local has a
// healthCheckNodePort, where each host's proxy reports whether it has local endpoints.
func needsHealthCheck(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

func serviceInvalid(name string, errs field.ErrorList) error {
	return apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Service").GroupKind(), name, errs)
}

// undo collects releases to run when the write fails.
type undo []func(context.Context)

func (u undo) run(ctx context.Context) {
	for _, f := range u {
		f(ctx)
	}
}

// assign allocates what svc lacks (reusing old's values on update) and returns the releases
// that undo it. Values outside the ranges are left for validation to reject.
func (s *serviceAllocators) assign(ctx context.Context, svc, old *corev1.Service, dryRun bool) (undo, error) {
	var rollback undo
	fail := func(err error) (undo, error) {
		rollback.run(ctx)
		return nil, err
	}
	if needsClusterIP(svc) {
		if svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) > 0 {
			svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		}
		if svc.Spec.ClusterIP == "" && old != nil && needsClusterIP(old) {
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = old.Spec.ClusterIP, old.Spec.ClusterIPs
		}
		keep := old != nil && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP == old.Spec.ClusterIP
		switch {
		case keep:
		case svc.Spec.ClusterIP == "":
			off, err := s.ips.allocate(ctx, -1, dryRun)
			if err != nil {
				return fail(apierrors.NewInternalError(fmt.Errorf("allocate a ClusterIP: %w", err)))
			}
			svc.Spec.ClusterIP = s.ipAt(off)
			if !dryRun {
				rollback = append(rollback, func(ctx context.Context) { _ = s.ips.release(ctx, off) })
			}
		default:
			if off, ok := s.ipOffset(svc.Spec.ClusterIP); ok {
				if _, err := s.ips.allocate(ctx, off, dryRun); err != nil {
					if err == errTaken {
						return fail(serviceInvalid(svc.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), svc.Spec.ClusterIP,
							"failed to allocate IP "+svc.Spec.ClusterIP+": provided IP is already allocated")}))
					}
					return fail(apierrors.NewInternalError(err))
				}
				if !dryRun {
					rollback = append(rollback, func(ctx context.Context) { _ = s.ips.release(ctx, off) })
				}
			}
		}
		if svc.Spec.ClusterIP != "" {
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
	} else if svc.Spec.Type == corev1.ServiceTypeExternalName {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	}
	// Requested node ports and health check port are taken before any is picked at random, so
	// a random pick never takes a value the same Service asks for.
	type pick struct {
		port *int32
		what string
	}
	var random []pick
	if needsNodePorts(svc) {
		oldPorts := map[string]int32{}
		if old != nil && needsNodePorts(old) {
			for _, p := range old.Spec.Ports {
				oldPorts[fmt.Sprintf("%s/%d", p.Protocol, p.Port)] = p.NodePort
				oldPorts[p.Name] = p.NodePort
			}
		}
		oldSet := map[int32]bool{}
		for _, v := range oldPorts {
			oldSet[v] = true
		}
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			if p.NodePort == 0 {
				if v, ok := oldPorts[fmt.Sprintf("%s/%d", p.Protocol, p.Port)]; ok && v != 0 {
					p.NodePort = v
				} else if v, ok := oldPorts[p.Name]; ok && p.Name != "" && v != 0 {
					p.NodePort = v
				}
			}
			switch {
			case p.NodePort != 0 && oldSet[p.NodePort]:
			case p.NodePort == 0:
				random = append(random, pick{&p.NodePort, "a node port"})
			case int(p.NodePort) >= s.portMin && int(p.NodePort) <= s.portMax:
				off := int(p.NodePort) - s.portMin
				if _, err := s.ports.allocate(ctx, off, dryRun); err != nil {
					if err == errTaken {
						return fail(serviceInvalid(svc.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "ports").Index(i).Child("nodePort"), p.NodePort,
							fmt.Sprintf("provided port is already allocated"))}))
					}
					return fail(apierrors.NewInternalError(err))
				}
				if !dryRun {
					rollback = append(rollback, func(ctx context.Context) { _ = s.ports.release(ctx, off) })
				}
			}
		}
	} else {
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
	}
	oldHC := int32(0)
	if old != nil && needsHealthCheck(old) {
		oldHC = old.Spec.HealthCheckNodePort
	}
	if needsHealthCheck(svc) {
		if svc.Spec.HealthCheckNodePort == 0 {
			svc.Spec.HealthCheckNodePort = oldHC
		}
		hp := svc.Spec.HealthCheckNodePort
		switch {
		case hp != 0 && hp == oldHC:
		case hp == 0:
			random = append(random, pick{&svc.Spec.HealthCheckNodePort, "a health check node port"})
		case int(hp) >= s.portMin && int(hp) <= s.portMax:
			off := int(hp) - s.portMin
			if _, err := s.ports.allocate(ctx, off, dryRun); err != nil {
				if err == errTaken {
					return fail(serviceInvalid(svc.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "healthCheckNodePort"), hp,
						"provided port is already allocated")}))
				}
				return fail(apierrors.NewInternalError(err))
			}
			if !dryRun {
				rollback = append(rollback, func(ctx context.Context) { _ = s.ports.release(ctx, off) })
			}
		}
	} else if old != nil && svc.Spec.HealthCheckNodePort == old.Spec.HealthCheckNodePort {
		// As upstream: a Service that no longer needs the port loses it (one set by the
		// writer where none is needed is left for validation to refuse).
		svc.Spec.HealthCheckNodePort = 0
	}
	for _, r := range random {
		off, err := s.ports.allocate(ctx, -1, dryRun)
		if err != nil {
			return fail(apierrors.NewInternalError(fmt.Errorf("allocate %s: %w", r.what, err)))
		}
		*r.port = int32(s.portMin + off)
		if !dryRun {
			rollback = append(rollback, func(ctx context.Context) { _ = s.ports.release(ctx, off) })
		}
	}
	return rollback, nil
}

// releaseAll frees what svc holds that keep does not (keep may be nil).
func (s *serviceAllocators) releaseAll(ctx context.Context, svc, keep *corev1.Service) {
	if svc == nil {
		return
	}
	if needsClusterIP(svc) && svc.Spec.ClusterIP != "" && (keep == nil || !needsClusterIP(keep) || keep.Spec.ClusterIP != svc.Spec.ClusterIP) {
		if off, ok := s.ipOffset(svc.Spec.ClusterIP); ok {
			_ = s.ips.release(ctx, off)
		}
	}
	kept := map[int32]bool{}
	if keep != nil && needsNodePorts(keep) {
		for _, p := range keep.Spec.Ports {
			kept[p.NodePort] = true
		}
	}
	if keep != nil && needsHealthCheck(keep) {
		kept[keep.Spec.HealthCheckNodePort] = true
	}
	var held []int32
	for _, p := range svc.Spec.Ports {
		held = append(held, p.NodePort)
	}
	if needsHealthCheck(svc) {
		held = append(held, svc.Spec.HealthCheckNodePort)
	}
	for _, port := range held {
		if port != 0 && !kept[port] && int(port) >= s.portMin && int(port) <= s.portMax {
			_ = s.ports.release(ctx, int(port)-s.portMin)
		}
	}
}

// install adds the allocation hooks to the Service store: allocation happens before the
// Service is written and is undone when the write fails; deletion releases.
func (s *serviceAllocators) install(st *genericregistry.Store) {
	st.BeginCreate = func(ctx context.Context, obj runtime.Object, options *metav1.CreateOptions) (genericregistry.FinishFunc, error) {
		svc := obj.(*corev1.Service)
		rollback, err := s.assign(ctx, svc, nil, len(options.DryRun) > 0)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, success bool) {
			if !success {
				rollback.run(context.WithoutCancel(ctx))
			}
		}, nil
	}
	st.BeginUpdate = func(ctx context.Context, obj, old runtime.Object, options *metav1.UpdateOptions) (genericregistry.FinishFunc, error) {
		svc, oldSvc := obj.(*corev1.Service), old.(*corev1.Service)
		dryRun := len(options.DryRun) > 0
		rollback, err := s.assign(ctx, svc, oldSvc, dryRun)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, success bool) {
			ctx = context.WithoutCancel(ctx)
			switch {
			case !success:
				rollback.run(ctx)
			case !dryRun:
				s.releaseAll(ctx, oldSvc, svc)
			}
		}, nil
	}
	st.AfterDelete = func(obj runtime.Object, options *metav1.DeleteOptions) {
		if len(options.DryRun) > 0 {
			return
		}
		if svc, ok := obj.(*corev1.Service); ok {
			s.releaseAll(context.Background(), svc, nil)
		}
	}
}
