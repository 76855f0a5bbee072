//go:build linux

// Package bench measures leaderrun against `etcdctl lock` and `consul
// lock` on the same real etcd and Consul clusters, on ZooKeeper, and
// against client-go's leaderelection (./k8slock) on a real kube-apiserver:
// crash failover, graceful handoff, the safety gap between the old child's
// death and the new child's start, lease loss when the leader is cut off,
// footprint, and many candidates on one key; and, step by step on every
// backend, where the time of one leaderrun failover goes (breakdown.go),
// and how fast `leaderrun step-down` moves the job (stepdown.go).
//
// The harness (Env, Lane, Contender) is plain code so that TestBenchSmoke,
// in the default test run, exercises every part of it; TestBenchmark (make
// bench) runs it in full and writes a results file under docs/results/
// (chaos.WriteRun), listed in docs/BENCHMARKS.md, which explains the
// method.
package bench
