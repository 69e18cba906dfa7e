// Command kubectl is upstream kubectl (k8s.io/kubectl) built from its own module at
// the Kubernetes version Flotilla serves, so tests and users get a client that
// matches the server without downloading a release. Built by hack/build-kubectl.sh
// into bin/kubectl; the shape of main follows kubernetes/kubernetes cmd/kubectl.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	// Registers the client auth plugins (exec, OIDC), as upstream kubectl does.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		// Pretty-print the error and exit with an error.
		util.CheckErr(err)
	}
}
