// Package kubernetes holds leadership of a key in a coordination.k8s.io/v1
// Lease, with the checks DESIGN §1 asks for. It uses client-go's REST
// client and kubeconfig loader only, with a scheme that knows the Lease and
// the meta types (see leaseClient).
//
// Layout: one Lease per key, named by LeaseName ("leaderrun.billing"), in
// one namespace. The holder's record is the Lease itself: holderIdentity is
// the candidate's ID; annotations under "leaderrun/" carry the host, pid,
// version, the epoch, a random term token that tells this leadership from
// any other with the same ID, the TTL, and observe.Contract.
//
// A Lease has no server-side expiry. Leadership therefore follows the
// observer-clock contract of package observe (DESIGN §1.12):
//
//   - the holder renews with an update conditioned on the resourceVersion of
//     its last successful write; its deadline counts from that update's
//     send time, and the TTL it reports is its own (leaseDurationSeconds is
//     that TTL rounded up to whole seconds);
//   - the first standby in the queue of candidates (queue.go: one Lease
//     per waiting candidate, each watching the one ahead) watches the
//     Lease (re-reading it after watch errors, never polling) and may take
//     over only when it has seen the same
//     resourceVersion for the holder's TTL plus observe.Allowance on its own
//     monotonic clock, with an update conditioned on that resourceVersion;
//   - a Lease whose holder does not declare the contract (another tool) is
//     never taken over; leaderrun waits until it is released or deleted.
//
// Failover after a holder vanishes without releasing therefore takes
// between TTL + allowance and TTL + allowance + renew interval; a holder
// that stops normally, or whose dead-man guard releases for it, hands over
// at once.
//
// Epoch: the resourceVersion of the write that made us holder. In
// kube-apiserver it is the etcd revision of that write, which only grows,
// also across deleting and re-creating the Lease (leaseTransitions starts
// over then, so it cannot serve). A resourceVersion that is not a positive
// integer, or not greater than the epoch recorded by the previous holder, is
// refused (exit 125): the server does not give what the epoch needs. The
// first renewal writes the epoch into the Lease so that status and check
// can read it.
package kubernetes
