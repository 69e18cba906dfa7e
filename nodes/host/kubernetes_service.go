package host

import (
	"context"
	"net"
	"slices"
	"sort"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// ControlPlaneLabel marks the Nodes of the hosts that serve the API (as k3s servers' Nodes):
// each server sets it on its own Node with the API server's identity (labelControlPlane). A
// node identity may not set it (NodeRestriction), so a worker cannot claim it.
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// runKubernetesService keeps the Service default/kubernetes (the first address of the service
// CIDR, port 443) and its EndpointSlice, listing the API of every Ready host that serves it
// (ControlPlaneLabel), as an upstream API server does: pods find the API through it and its
// environment variables. Every server runs this loop; they all compute the same slice from
// the same Nodes.
//
// self is this server's Node: it counts as a server before its label is set, and until the
// slice lists it the loop runs every second rather than every 10 s, so that the first pods
// of a site find the API as soon as they start.
func runKubernetesService(ctx context.Context, client kubernetes.Interface, clusterIP net.IP, apiPort int32, self string) {
	log := logrus.WithField("service", "default/kubernetes")
	failures := 0
	for {
		listed, err := syncKubernetesService(ctx, client, clusterIP, apiPort, self)
		if err != nil && ctx.Err() == nil {
			// One failure is a race with another host; several in a row leave pods unable to
			// find the API, which someone must look at.
			if failures++; failures == 3 {
				log.WithError(err).Warn("cannot keep Service default/kubernetes and its EndpointSlice up to date")
			} else {
				log.WithError(err).Debug("sync")
			}
		} else {
			failures = 0
		}
		interval := 10 * time.Second
		if !listed {
			interval = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// syncKubernetesService writes the Service and its slice; it reports whether the slice lists
// self (a Ready Node).
func syncKubernetesService(ctx context.Context, client kubernetes.Interface, clusterIP net.IP, apiPort int32, self string) (bool, error) {
	svcs := client.CoreV1().Services(metav1.NamespaceDefault)
	if _, err := svcs.Get(ctx, "kubernetes", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		_, err = svcs.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
			Spec: corev1.ServiceSpec{ClusterIP: clusterIP.String(), Type: corev1.ServiceTypeClusterIP,
				Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(apiPort)}}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
	} else if err != nil {
		return false, err
	}
	// Only the servers' Nodes and this host's own are read: what the sync costs stays the
	// same on a site of many workers (whose API port is a proxy on their loopback).
	servers, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: ControlPlaneLabel + "=true"})
	if err != nil {
		return false, err
	}
	nodes := servers.Items
	if !slices.ContainsFunc(nodes, func(n corev1.Node) bool { return n.Name == self }) {
		// Not labelled yet (labelControlPlane runs beside this loop).
		n, err := client.CoreV1().Nodes().Get(ctx, self, metav1.GetOptions{})
		switch {
		case err == nil:
			nodes = append(nodes, *n)
		case !apierrors.IsNotFound(err):
			return false, err
		}
	}
	var ips []string
	listed := false
	for _, n := range nodes {
		if ip := nodeInternalIP(&n); ip != "" && nodeReady(&n) {
			ips = append(ips, ip)
			listed = listed || n.Name == self
		}
	}
	if len(ips) == 0 {
		// No server Ready and labelled yet (a site starting, or just upgraded): keep what is
		// there rather than leave pods without an API.
		return false, nil
	}
	sort.Strings(ips)
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault, Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "apiserver.flotilla.dev"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(apiPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, ip := range ips {
		want.Endpoints = append(want.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}})
	}
	sliceClient := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault)
	cur, err := sliceClient.Get(ctx, "kubernetes", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = sliceClient.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return listed && err == nil, err
	}
	if err != nil {
		return false, err
	}
	same := len(cur.Endpoints) == len(want.Endpoints)
	for i := 0; same && i < len(cur.Endpoints); i++ {
		same = len(cur.Endpoints[i].Addresses) == 1 && cur.Endpoints[i].Addresses[0] == want.Endpoints[i].Addresses[0]
	}
	if same && len(cur.Ports) == 1 && cur.Ports[0].Port != nil && *cur.Ports[0].Port == apiPort {
		return listed, nil
	}
	cur.Endpoints, cur.Ports, cur.Labels = want.Endpoints, want.Ports, want.Labels
	_, err = sliceClient.Update(ctx, cur, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return false, nil
	}
	return listed && err == nil, err
}

// labelControlPlane sets ControlPlaneLabel on the Node of this host (a server) once it exists.
func labelControlPlane(ctx context.Context, client kubernetes.Interface, name string) error {
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n.Labels[ControlPlaneLabel] == "true" {
		return nil
	}
	patch := []byte(`{"metadata":{"labels":{"` + ControlPlaneLabel + `":"true"}}}`)
	_, err = client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
