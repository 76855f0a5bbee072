// Command kube-apiserver is the upstream Kubernetes API server, built from the
// Go module proxy as a library so that leaderrun's integration tests can run
// a real one against the etcd they already start.
//
// k8s.io/kubernetes cannot be fetched with `go install`: its go.mod replaces
// every k8s.io/* staging module with a folder of its own repository. This
// module replaces each of them with the published release of the same code.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
