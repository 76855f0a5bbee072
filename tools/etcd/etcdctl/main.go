// Command etcdctl is the upstream etcd command-line client, built from the Go
// module proxy as a library. leaderrun's tests and operators use it to
// inspect a test cluster and to compare behaviour with `etcdctl lock`.
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() {
	// MustStart parses os.Args itself and exits non-zero on a failed command,
	// exactly like the upstream binary.
	ctlv3.MustStart()
}
