//go:build linux

package chaos

import (
	"testing"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// DynamoDBTiming is the suite's timeline on DynamoDB: etcd's, as on
// PostgreSQL. A standby takes a silent holder over after TTL + 250ms of
// seeing no change in the lease item, on its own clock.
var DynamoDBTiming = EtcdTiming

// DynamoDB adapts one dynalite server (a DynamoDB-compatible server; the
// service is one endpoint per region to its clients), its tables kept on
// disk so that a killed server comes back with its items. Every host
// reaches it through its own proxy.
type DynamoDB struct {
	*testcluster.Dynalite
	t testing.TB
}

// StartDynamoDB starts a dynalite server of the test's own.
func StartDynamoDB(t testing.TB) DynamoDB {
	return DynamoDB{testcluster.StartDynaliteOnDisk(t), t}
}

// Name implements Cluster.
func (DynamoDB) Name() string { return "dynamodb" }

// Servers implements Cluster.
func (DynamoDB) Servers() int { return 1 }

// ServerAddr implements Cluster.
func (d DynamoDB) ServerAddr(int) string { return d.Addr() }

// Protocol implements Cluster: DynamoDB's API is HTTP/1.1 (plain HTTP to
// dynalite), one request per call.
func (DynamoDB) Protocol() Protocol { return HTTP1 }

// Kill implements Cluster.
func (d DynamoDB) Kill(int) { d.Dynalite.Kill() }

// Restart implements Cluster: the server again, on its port, with its
// items.
func (d DynamoDB) Restart(int) { d.Dynalite.Restart(d.t) }

// WaitHealthy implements Cluster: Restart returns once the server answers.
func (DynamoDB) WaitHealthy(testing.TB) {}

// Timing implements Cluster.
func (DynamoDB) Timing() Timing { return DynamoDBTiming }

// LeaderrunArgs implements Cluster: the host's proxy as the endpoint; the
// first host to run creates the table.
func (DynamoDB) LeaderrunArgs(addrs []string) []string {
	return []string{"--backend", "dynamodb", "--dynamodb-endpoint", "http://" + addrs[0], "--dynamodb-create-table"}
}

// HostServers implements Cluster.
func (DynamoDB) HostServers(int) []int { return []int{0} }

// HostEnv implements Enver: dynalite's fake credentials and region.
func (d DynamoDB) HostEnv() []string { return d.Env() }

// Enver is a Cluster whose clients need variables in their environment
// (DynamoDB: credentials and a region, as the AWS SDK reads them).
type Enver interface{ HostEnv() []string }

// HostEnv is what a client of cl adds to its environment.
func HostEnv(cl Cluster) []string {
	if e, ok := cl.(Enver); ok {
		return e.HostEnv()
	}
	return nil
}
