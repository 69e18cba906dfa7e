package main

import (
	_ "github.com/sirupsen/logrus"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	_ "k8s.io/apiserver/pkg/registry/generic/registry"
	_ "k8s.io/apiserver/pkg/server"
	_ "k8s.io/apiserver/pkg/server/options"
	_ "k8s.io/apiserver/pkg/util/compatibility"
	_ "k8s.io/apiserver/pkg/authentication/token/tokenfile"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/component-base/version"
	_ "k8s.io/component-helpers/scheduling/corev1"
	_ "k8s.io/kube-openapi/pkg/common"
)

func main() {}
