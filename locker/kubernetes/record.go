package kubernetes

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/leaderrun/leaderrun/locker/kubernetes/kubewire"
	"os"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaderrun/leaderrun/locker/observe"
)

// Annotations of the holder's record on the Lease (kubewire, which the
// guard shares).
const (
	annPrefix   = kubewire.AnnPrefix
	annKey      = kubewire.AnnKey
	annContract = kubewire.AnnContract
	annTTL      = kubewire.AnnTTL
	annTerm     = kubewire.AnnTerm
	annEpoch    = kubewire.AnnEpoch
	annPrevious = kubewire.AnnPrevious
	annHost     = kubewire.AnnHost
	annPID      = kubewire.AnnPID
	annVersion  = kubewire.AnnVersion
	annReleased = kubewire.AnnReleased
	// annHolders is the holder's --holders where it is more than 1.
	annHolders = annPrefix + "holders"
	// annPriority is the holder's --priority where it is not 0.
	annPriority = annPrefix + "priority"
)

// newTerm returns a random token naming one leadership.
func newTerm() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}

// holderOf returns the holder of a Lease; empty when nobody holds it.
func holderOf(ls *coordinationv1.Lease) string {
	if ls == nil || ls.Spec.HolderIdentity == nil {
		return ""
	}
	return *ls.Spec.HolderIdentity
}

// termOf returns the term token of the Lease's holder.
func termOf(ls *coordinationv1.Lease) string {
	if ls == nil || holderOf(ls) == "" {
		return ""
	}
	return ls.Annotations[annTerm]
}

// declaredTTL returns the TTL a holder that follows the observer-clock
// contract declares: the larger of its TTL annotation and
// leaseDurationSeconds. ok is false for a holder that does not declare the
// contract, or whose record lacks one of the two (a leaderrun holder always
// writes both); such a Lease is never taken over by observation.
func declaredTTL(ls *coordinationv1.Lease) (time.Duration, bool) {
	if ls.Annotations[annContract] != observe.Contract || ls.Spec.LeaseDurationSeconds == nil {
		return 0, false
	}
	ttl, err := time.ParseDuration(ls.Annotations[annTTL])
	if err != nil || ttl <= 0 {
		return 0, false
	}
	return max(ttl, time.Duration(*ls.Spec.LeaseDurationSeconds)*time.Second), true
}

// leaseSeconds is leaseDurationSeconds for ttl: rounded up to whole seconds.
func leaseSeconds(ttl time.Duration) int32 {
	return int32((ttl + time.Second - 1) / time.Second)
}

// declarationChanged says how ls no longer carries the declaration this
// Locker's holder writes (the contract annotation, leaderrun/ttl and
// leaseDurationSeconds); empty when it does. Standbys time their takeover
// by what the Lease declares, so a declaration someone else changed is
// one this holder can no longer keep (DESIGN §1.12).
func (l *Locker) declarationChanged(ls *coordinationv1.Lease) string {
	if got := ls.Annotations[annContract]; got != observe.Contract {
		return fmt.Sprintf("someone else changed the Lease's %s annotation (%q, ours is %q)", annContract, got, observe.Contract)
	}
	if got := ls.Annotations[annTTL]; got != l.ttl.String() {
		return fmt.Sprintf("someone else changed the Lease's %s annotation (%q, ours is %q)", annTTL, got, l.ttl.String())
	}
	if want := leaseSeconds(l.ttl); ls.Spec.LeaseDurationSeconds == nil || *ls.Spec.LeaseDurationSeconds != want {
		got := "none"
		if ls.Spec.LeaseDurationSeconds != nil {
			got = strconv.Itoa(int(*ls.Spec.LeaseDurationSeconds))
		}
		return fmt.Sprintf("someone else changed the Lease's leaseDurationSeconds (%s, ours is %d)", got, want)
	}
	return ""
}

// parseEpoch reads an epoch annotation; zero when absent or malformed.
func parseEpoch(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// epochOf turns a resourceVersion into an epoch. kube-apiserver's
// resourceVersion is the etcd revision of the write; anything else does
// not give the ordering the epoch needs (DESIGN §1.1).
func epochOf(rv string) (uint64, error) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("the server's resourceVersion %q is not a positive integer, so it cannot serve as an increasing epoch", rv)
	}
	return n, nil
}

// claim returns cur (nil: a new Lease) rewritten to name this candidate,
// with the given term, as holder. The write that stores it makes us leader;
// its resourceVersion is our epoch.
func (l *Locker) claim(cur *coordinationv1.Lease, term string) *coordinationv1.Lease {
	var ls *coordinationv1.Lease
	if cur == nil {
		ls = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace}}
	} else {
		ls = cur.DeepCopy()
	}
	ann := ls.Annotations
	if ann == nil {
		ann = map[string]string{}
	}
	previous := ann[annEpoch]
	if previous == "" {
		previous = ann[annPrevious]
	}
	delete(ann, annEpoch)
	delete(ann, annReleased)
	if previous != "" {
		ann[annPrevious] = previous
	}
	host, _ := os.Hostname()
	ann[annKey] = l.opts.Name()
	ann[annContract] = observe.Contract
	ann[annTTL] = l.ttl.String()
	ann[annTerm] = term
	ann[annHost] = host
	ann[annPID] = strconv.Itoa(os.Getpid())
	if l.opts.Version != "" {
		ann[annVersion] = l.opts.Version
	} else {
		delete(ann, annVersion)
	}
	if l.opts.Holders > 1 {
		ann[annHolders] = strconv.Itoa(l.opts.Holders)
	} else {
		delete(ann, annHolders)
	}
	if l.opts.Priority != 0 {
		ann[annPriority] = strconv.Itoa(l.opts.Priority)
	} else {
		delete(ann, annPriority)
	}
	ls.Annotations = ann

	id := l.opts.ID
	secs := leaseSeconds(l.ttl)
	now := metav1.NewMicroTime(time.Now())
	if holderOf(cur) != id {
		n := int32(0)
		if cur != nil && cur.Spec.LeaseTransitions != nil {
			n = *cur.Spec.LeaseTransitions + 1
		}
		ls.Spec.LeaseTransitions = &n
	}
	ls.Spec.HolderIdentity = &id
	ls.Spec.LeaseDurationSeconds = &secs
	ls.Spec.AcquireTime = &now
	ls.Spec.RenewTime = &now
	return ls
}

// released returns cur with no holder and the marker of term's own
// release (kubewire.AnnReleased), keeping the epoch so that the next
// holder can check its own is greater.
func released(cur *coordinationv1.Lease, term string) *coordinationv1.Lease {
	ls := cur.DeepCopy()
	ls.Spec.HolderIdentity = nil
	ls.Spec.AcquireTime = nil
	ls.Spec.RenewTime = nil
	for _, a := range kubewire.Released {
		delete(ls.Annotations, a)
	}
	if ls.Annotations == nil {
		ls.Annotations = map[string]string{}
	}
	ls.Annotations[annReleased] = term
	return ls
}

// releasedAnew is a released Lease to create in place of one deleted by
// hand: free, with term's release marker, the key, and the epochs last
// (our last write of it, if known) recorded, so that the next holder can
// still check its epoch is greater. Nothing else of the deleted Lease
// comes back (its once-per records are forgotten, as BACKENDS says).
func (l *Locker) releasedAnew(last *coordinationv1.Lease, term string) *coordinationv1.Lease {
	ann := map[string]string{annKey: l.opts.Name(), annReleased: term}
	if last != nil {
		for _, a := range []string{annEpoch, annPrevious} {
			if v := last.Annotations[a]; v != "" {
				ann[a] = v
			}
		}
	}
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace, Annotations: ann}}
}
