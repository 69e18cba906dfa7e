package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// namespaceFile is the pod's namespace in its service account volume.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// kube talks to the API as the pod's service account, with the in-cluster configuration
// (KUBERNETES_SERVICE_HOST and _PORT, the token and ca.crt of the service account volume):
//
//	kube list pods|secrets [NAMESPACE]
//	    print the names, one a line; the API's error on stderr and exit 1 on failure
//	kube watch-list pods|secrets NAMESPACE INTERVAL
//	    list every INTERVAL for ever, printing "ok N" or "error: MESSAGE"
//
// The client reads the token file again every minute, so a long-running pod keeps working
// after its token was replaced. It is the dynamic client: the typed clientset would make the
// image more than twice as big.
func kube(args []string) int {
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	switch arg(0) {
	case "list":
		if arg(1) == "" || len(args) > 3 {
			return fail("usage: kube list pods|secrets [NAMESPACE]")
		}
		client, ns, err := kubeClient(arg(2))
		if err != nil {
			return fail("%v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		names, err := listNames(ctx, client, arg(1), ns)
		if err != nil {
			return fail("%v", err)
		}
		for _, n := range names {
			fmt.Println(n)
		}
		return 0
	case "watch-list":
		if arg(1) == "" || arg(2) == "" || arg(3) == "" || len(args) > 4 {
			return fail("usage: kube watch-list pods|secrets NAMESPACE INTERVAL")
		}
		interval, err := time.ParseDuration(arg(3))
		if err != nil || interval <= 0 {
			return fail("kube watch-list: INTERVAL %q is not a positive duration (e.g. 10s)", arg(3))
		}
		client, ns, err := kubeClient(arg(2))
		if err != nil {
			return fail("%v", err)
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), max(interval, 30*time.Second))
			names, err := listNames(ctx, client, arg(1), ns)
			cancel()
			if err != nil {
				fmt.Printf("error: %v\n", err)
			} else {
				fmt.Printf("ok %d\n", len(names))
			}
			time.Sleep(interval)
		}
	}
	return fail("usage: kube list|watch-list pods|secrets ...")
}

// kubeClient makes the client once, from the in-cluster configuration; ns defaults to the
// pod's own namespace.
func kubeClient(ns string) (dynamic.Interface, string, error) {
	if ns == "" {
		b, err := os.ReadFile(namespaceFile)
		if err != nil {
			return nil, "", fmt.Errorf("no NAMESPACE given and the pod's is unknown: %v", err)
		}
		ns = strings.TrimSpace(string(b))
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, "", fmt.Errorf("in-cluster configuration: %v", err)
	}
	cfg.UserAgent = "toolbox"
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	return client, ns, nil
}

// listNames lists pods or secrets of ns by name.
func listNames(ctx context.Context, client dynamic.Interface, kind, ns string) ([]string, error) {
	switch kind {
	case "pod", "secret":
		kind += "s"
	case "pods", "secrets":
	default:
		return nil, fmt.Errorf("cannot list %q (pods or secrets)", kind)
	}
	list, err := client.Resource(schema.GroupVersionResource{Version: "v1", Resource: kind}).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, o := range list.Items {
		names = append(names, o.GetName())
	}
	return names, nil
}
