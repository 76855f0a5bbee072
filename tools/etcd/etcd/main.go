// Command etcd is the upstream etcd server, built from the Go module proxy as
// a library so that leaderrun's integration tests can run a real cluster.
//
// Upstream etcd cannot be fetched with `go install` because its go.mod uses
// replace directives; importing etcdmain from this small module sidesteps
// that while keeping the exact released server code.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
