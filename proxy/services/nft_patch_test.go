package services

import (
	"fmt"
	"maps"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestPatchMatchesRender checks that the incremental path (Compiler, then patch) reaches the
// same ruleset as compiling and rendering everything, and that the chain and element changes
// it reports turn the old ruleset into the new one.
func TestPatchMatchesRender(t *testing.T) {
	node := mkNode("n1", "10.213.0.1")
	var svcs []*v1.Service
	var slices []*discoveryv1.EndpointSlice
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("s%d", i)
		var opts []svcOpt
		switch i {
		case 1:
			opts = append(opts, nodePort(30080), etpLocal)
		case 2:
			opts = append(opts, affinity(60), externalIP("192.0.2.10"))
		case 3:
			opts = append(opts, itpLocal)
		}
		svcs = append(svcs, mkSvc(name, fmt.Sprintf("10.96.0.%d", 10+i), 80, opts...))
		// Services 0 and 4 share an endpoint: its hairpin element is held twice.
		slices = append(slices, mkSlice(name+"-1", name, 8080, readyEP(fmt.Sprintf("10.244.1.%d", i%4+1), "n1"), readyEP("10.244.2.9", "n2")))
	}
	steps := []func(){
		func() { slices[0] = mkSlice("s0-1", "s0", 8080, readyEP("10.244.3.1", "n1")) },              // endpoints move
		func() { slices[4] = mkSlice("s4-1", "s4", 8080) },                                           // no endpoints any more
		func() { svcs = svcs[1:] },                                                                   // a Service goes
		func() { svcs = append(svcs, mkSvc("s0", "10.96.0.10", 81, nodePort(30081))) },               // and comes back, changed
		func() { slices[2] = mkSlice("s2-1", "s2", 8080, readyEP("10.244.1.3", "n1")) },              // affinity endpoint goes
		func() { svcs[0] = mkSvc("s1", "10.96.0.11", 80, nodePort(30080)) },                          // policy Local -> Cluster
		func() { node = mkNode("n1", "10.213.0.1", "10.213.0.7") },                                   // a host address comes
		func() { slices = append(slices, mkSlice("s3-2", "s3", 8080, readyEP("10.244.2.9", "n1"))) }, // a second slice
		// svcs is now s1..s5, s0; slices[5] is s5's. The flat path and the chain path:
		func() { slices[5] = mkSlice("s5-1", "s5", 8080, manyEPs(3)...) },                  // endpoint count 2 -> 3 (flat)
		func() { svcs[4] = mkSvc("s5", "10.96.0.15", 80, affinity(30)) },                   // flat -> chain (affinity)
		func() { svcs[4] = mkSvc("s5", "10.96.0.15", 80) },                                 // chain -> flat
		func() { slices[5] = mkSlice("s5-1", "s5", 8080, manyEPs(maxFlatEndpoints+1)...) }, // flat -> chain (too many)
		func() { slices[5] = mkSlice("s5-1", "s5", 8080, readyEP("10.244.3.1", "n1")) },    // chain -> flat, one endpoint
		func() { svcs[4] = mkSvc("s5", "10.96.0.15", 80, itpLocal) },                       // Local, the endpoint is local: flat
		func() { slices[5] = mkSlice("s5-1", "s5", 8080, readyEP("10.244.3.1", "n2")) },    // no local endpoint: chain (drop)
	}
	// be compares every port; beChanged is told which Services may have changed, as the
	// agent's loop is by the informers' events (here: every Service before and after the step).
	be, beChanged := NewNftables(NftablesOptions{}), NewNftables(NftablesOptions{})
	comp, compChanged := &Compiler{}, &Compiler{}
	be.applied, be.refs, be.ports = renderPorts(comp.Compile(svcs, slices, node), be.opts.ClusterCIDR)
	beChanged.applied, beChanged.refs, beChanged.ports = renderPorts(compChanged.Compile(svcs, slices, node), be.opts.ClusterCIDR)
	names := func() map[nsName]bool {
		m := map[nsName]bool{}
		for _, s := range svcs {
			m[nsName{s.Namespace, s.Name}] = true
		}
		return m
	}
	get := func(k nsName) (*v1.Service, []*discoveryv1.EndpointSlice) {
		var svc *v1.Service
		for _, s := range svcs {
			if s.Namespace == k.ns && s.Name == k.name {
				svc = s
			}
		}
		var sl []*discoveryv1.EndpointSlice
		for _, s := range slices {
			if s.Namespace == k.ns && s.Labels[discoveryv1.LabelServiceName] == k.name {
				sl = append(sl, s)
			}
		}
		return svc, sl
	}
	for i, step := range steps {
		dirty := names()
		step()
		maps.Copy(dirty, names())
		prev := cloneRuleset(be.applied)
		ds := comp.Compile(svcs, slices, node)
		if want := Compile(svcs, slices, node); !reflect.DeepEqual(ds, want) {
			t.Fatalf("step %d: Compiler gave\n%+v\nCompile gave\n%+v", i, ds, want)
		}
		dsChanged, keys, ok := compChanged.compileChanged(dirty, get, node)
		if !ok || !reflect.DeepEqual(dsChanged, ds) {
			t.Fatalf("step %d: compileChanged gave (ok %v)\n%+v\nCompile gave\n%+v", i, ok, dsChanged, ds)
		}
		want := render(ds, be.opts.ClusterCIDR)
		wd, we := diffRulesets(prev, want), diffElems(prev, want)
		for _, c := range []struct {
			name    string
			be      *Nftables
			ds      DesiredState
			changes []portChange
		}{{"every port", be, ds, be.changes(ds)}, {"changed ports", beChanged, dsChanged, beChanged.changesOf(dsChanged, keys)}} {
			d, e, ok := c.be.patch(c.ds, c.changes)
			if !ok {
				t.Fatalf("step %d, %s: conflict", i, c.name)
			}
			if !reflect.DeepEqual(c.be.applied, want) {
				t.Fatalf("step %d, %s: patched ruleset differs from a full render:\n%+v\n%+v", i, c.name, c.be.applied, want)
			}
			if !reflect.DeepEqual(d, wd) || !sameElemDelta(e, we) {
				t.Fatalf("step %d, %s: changes\n%+v %+v\nwant\n%+v %+v", i, c.name, d, e, wd, we)
			}
		}
	}
}

func cloneRuleset(rs *ruleset) *ruleset {
	c := newRuleset()
	for k, v := range rs.chains {
		c.chains[k] = v
	}
	for k, v := range rs.affinity {
		c.affinity[k] = v
	}
	for k, v := range rs.serviceIPs {
		c.serviceIPs[k] = v
	}
	for k, v := range rs.nodePorts {
		c.nodePorts[k] = v
	}
	for k, v := range rs.flatVIPs {
		c.flatVIPs[k] = v
	}
	for k, v := range rs.flatEPs {
		c.flatEPs[k] = v
	}
	for k, v := range rs.noEPServices {
		c.noEPServices[k] = v
	}
	for k, v := range rs.noEPNodePorts {
		c.noEPNodePorts[k] = v
	}
	for k, v := range rs.nodeIPs {
		c.nodeIPs[k] = v
	}
	for k, v := range rs.clusterIPs {
		c.clusterIPs[k] = v
	}
	for k, v := range rs.hairpin {
		c.hairpin[k] = v
	}
	return c
}

// sameElemDelta compares element changes ignoring the order of the deleted keys.
func sameElemDelta(a, b elemDelta) bool {
	set := func(v any) map[string]bool {
		m := map[string]bool{}
		rv := reflect.ValueOf(v)
		for i := 0; i < rv.Len(); i++ {
			m[fmt.Sprint(rv.Index(i).Interface())] = true
		}
		return m
	}
	eqMap := func(x, y any) bool {
		rx, ry := reflect.ValueOf(x), reflect.ValueOf(y)
		if rx.Len() != ry.Len() {
			return false
		}
		for _, k := range rx.MapKeys() {
			if v := ry.MapIndex(k); !v.IsValid() || v.Interface() != rx.MapIndex(k).Interface() {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(set(a.serviceIPsDel), set(b.serviceIPsDel)) && eqMap(a.serviceIPsAdd, b.serviceIPsAdd) &&
		reflect.DeepEqual(set(a.nodePortsDel), set(b.nodePortsDel)) && eqMap(a.nodePortsAdd, b.nodePortsAdd) &&
		reflect.DeepEqual(set(a.flatVIPsDel), set(b.flatVIPsDel)) && eqMap(a.flatVIPsAdd, b.flatVIPsAdd) &&
		reflect.DeepEqual(set(a.flatEPsDel), set(b.flatEPsDel)) && eqMap(a.flatEPsAdd, b.flatEPsAdd) &&
		reflect.DeepEqual(set(a.noEPServicesDel), set(b.noEPServicesDel)) && eqMap(a.noEPServicesAdd, b.noEPServicesAdd) &&
		reflect.DeepEqual(set(a.noEPNodePortsDel), set(b.noEPNodePortsDel)) && eqMap(a.noEPNodePortsAdd, b.noEPNodePortsAdd) &&
		reflect.DeepEqual(set(a.nodeIPsDel), set(b.nodeIPsDel)) && eqMap(a.nodeIPsAdd, b.nodeIPsAdd) &&
		reflect.DeepEqual(set(a.clusterIPsDel), set(b.clusterIPsDel)) && eqMap(a.clusterIPsAdd, b.clusterIPsAdd) &&
		reflect.DeepEqual(set(a.hairDel), set(b.hairDel)) && eqMap(a.hairAdd, b.hairAdd)
}
