//go:build linux

// Command leaderrun runs a command only while this host leads a key in
// Consul, etcd, ZooKeeper, a Kubernetes Lease, a PostgreSQL table, a
// DynamoDB table or a local lock file, and stops it before the lease could
// pass to anyone else. The command line is package internal/cmdline.
package main

import (
	"os"

	"github.com/leaderrun/leaderrun/internal/cmdline"
)

func main() { os.Exit(cmdline.Main(os.Args)) }
