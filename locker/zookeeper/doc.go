// Package zookeeper holds leadership of a key in a ZooKeeper ensemble with
// ephemeral sequential znodes, the election recipe of ZooKeeper's own
// documentation, with the checks DESIGN §1 asks for.
//
// Layout: every candidate opens its own session and creates the ephemeral
// sequential znode /<chroot>/<prefix>/<key>/@<session-id-hex>-<sequence>
// holding its holder record. The lowest sequence leads; every other
// candidate watches only its immediate predecessor. The "@" cannot occur in
// a key (locker.ValidateKey), so the candidates of key "a" never mix with
// the znodes of key "a/b"; the session id in the name lets a candidate find
// its own znode again when the answer to its create was lost. Beside them
// are the persistent records ~released (the last znode released) and
// ~last (the last winner's znode, until its release), silent.go.
//
// Epoch: the czxid of the leader's own znode. Zxids only grow over an
// ensemble's life (epoch of the ZooKeeper leader in the high 32 bits, a
// counter below), so it exceeds every epoch granted before, also after the
// whole key path was deleted (DESIGN §1.1).
//
// Renewal: see Renew in lease.go for which request is used and what its
// success proves, read from ZooKeeper's server code.
package zookeeper
