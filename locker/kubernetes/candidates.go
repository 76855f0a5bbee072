package kubernetes

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/queue"
)

// Candidates lists the candidates waiting for the key (locker.Candidates):
// the entries of its queue (queue.go), in their order. A candidate that
// could not join the queue (its account may not create or delete Leases)
// or tries once (--no-wait) is not listed. The leader left the queue when
// it won. Listing needs the right to list Leases in the namespace.
func (l *Locker) Candidates(ctx context.Context) ([]locker.Candidate, error) {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	list, err := l.client.List(cctx, metav1.ListOptions{LabelSelector: labels.Set{labelQueue: l.queueLabel()}.String()})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list the candidates' queue of Lease %s/%s: %w", l.namespace, l.name, err)
	}
	listed := make([]queue.Listed, 0, len(list.Items))
	for i := range list.Items {
		it := &list.Items[i]
		if !strings.HasPrefix(it.Name, l.name+entryInfix) {
			continue
		}
		e := queue.Listed{Entry: toEntry(it)}
		if it.Spec.HolderIdentity != nil {
			e.ID = *it.Spec.HolderIdentity
		}
		e.Who, e.Described = queue.ParseWho(it.Annotations[annWho])
		listed = append(listed, e)
	}
	return queue.Listing(listed), nil
}
