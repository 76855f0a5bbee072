// Package etcd holds leadership of a key in etcd with a lease and an
// election key, in the manner of etcd's own election recipe but with the
// checks DESIGN §1 asks for: the epoch is the election key's CreateRevision,
// leadership is verified before it is returned, and renewals are single
// round trips driven by the supervisor.
//
// Layout: every candidate writes /<prefix>/<key>/@<lease-id-hex>, attached to
// its lease. The candidate whose key has the lowest CreateRevision leads;
// every other candidate watches only its immediate predecessor. The "@" cannot
// occur in a key (locker.ValidateKey), so the candidates of key "a" never
// mix with those of key "a/b". Beside them, with no lease, the winner's
// election key is named in /<prefix>/<key>/~last before it leads
// (Locker.lastKey), so that a candidate that never saw that key waits for
// its lease too.
package etcd
