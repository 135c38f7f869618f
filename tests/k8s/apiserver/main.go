// Command kube-apiserver builds the real Kubernetes API server from its Go module, for
// nri-resmgr's node-reporting and configuration tests. Nothing here changes its behaviour.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
