package postgres

import "sync"

// A release notifies too. Clear sends a notice on the control table's
// channel in its own statement, with the payload "lease KEY" (a digest
// past maxPayload): no key holds a space, so no control record's payload
// is one. Whichever listen this process holds on the table's channel
// (WaitControl's, for any key or slot of the table) hands such a notice to
// the candidates of this process waiting for that row
// (leaserow.RowNotifier), and a standby reads the freed row at once
// instead of at its next poll. Nothing depends on a notice arriving: with
// no listen (a server that refuses LISTEN, the moment between two
// listens, a release by hand or by an older leaderrun) the poll finds the
// free row as before.

// rowPayload is the notice payload of a release of key's row.
func rowPayload(key string) string { return notifyPayload("lease " + key) }

// rowWaits are the channels this process's waiting candidates wait on,
// one per table channel and payload, closed (and dropped) at a notice.
var rowWaits struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// rowWait returns a channel closed at the next notice of payload on
// channel that a listen of this process receives.
func rowWait(channel, payload string) <-chan struct{} {
	id := channel + "\x00" + payload
	rowWaits.mu.Lock()
	defer rowWaits.mu.Unlock()
	if rowWaits.m == nil {
		rowWaits.m = map[string]chan struct{}{}
	}
	c, ok := rowWaits.m[id]
	if !ok {
		c = make(chan struct{})
		rowWaits.m[id] = c
	}
	return c
}

// rowWake closes the channel of payload on channel, if anyone waits on it.
func rowWake(channel, payload string) {
	id := channel + "\x00" + payload
	rowWaits.mu.Lock()
	defer rowWaits.mu.Unlock()
	if c, ok := rowWaits.m[id]; ok {
		close(c)
		delete(rowWaits.m, id)
	}
}

// RowChanges implements leaserow.RowNotifier: a channel closed when a
// listen of this process hears of a release of the key's row; nil when
// the server refused LISTEN (no notice will come).
func (s *store) RowChanges() <-chan struct{} {
	s.mu.Lock()
	refused := s.listenRefused != nil
	s.mu.Unlock()
	if refused {
		return nil
	}
	return rowWait(s.channel, rowPayload(s.key))
}
