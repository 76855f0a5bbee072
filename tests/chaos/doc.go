//go:build linux

// Package chaos is the fault-injection harness behind leaderrun's chaos
// suite (this package's tests, `make chaos`) and benchmark
// (tests/bench, `make bench`).
//
// Its pieces are plain tools: a TCP proxy per host and backend server that
// can be cut (Refuse or Blackhole) to partition one host and that counts the
// host's requests (Proxy, Link); the backend clusters with the faults the
// suite injects (Cluster, over tests/testcluster); processes in their own
// process groups (Proc); /proc readings to find leftovers and measure
// footprint (Scan, Stat, RSS); and the report helpers (WriteRun, AddToList,
// ReplaceSection, Durations, Table). The fenced resource itself is package
// fence.
//
// docs/CHAOS.md explains the method and lists the runs; each run's results
// are a file of their own under docs/results/ (WriteRun).
package chaos
