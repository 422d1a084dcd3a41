package transfers

import (
	"sync"

	"github.com/payments/payments/activities"
)

// Listener tells requests waiting in this process the moment a transfer's posting commits. It
// is the worker's activities.PostedHook under `payments serve`, where the API and the worker
// share one process: the API then answers as soon as the ledger holds the transfer's final
// answer, instead of a persistence round trip later when Temporal has recorded the workflow's
// completion. The answer is the same stored bytes either way, and the workflow still completes
// (a crash in between re-runs the posting, which finds the transfer final).
type Listener struct {
	mu      sync.Mutex
	waiters map[string][]chan activities.Posted
}

// NewListener returns a Listener no one listens to yet.
func NewListener() *Listener { return &Listener{waiters: map[string][]chan activities.Posted{}} }

// Listen returns a channel that receives the outcome of transferID's posting, if it commits in
// this process; call stop when no longer listening.
func (l *Listener) Listen(transferID string) (posted <-chan activities.Posted, stop func()) {
	ch := make(chan activities.Posted, 1)
	l.mu.Lock()
	l.waiters[transferID] = append(l.waiters[transferID], ch)
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		ws := l.waiters[transferID]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(l.waiters, transferID)
		} else {
			l.waiters[transferID] = ws
		}
	}
}

// Posted tells those listening to transferID's posting how it ended (activities.PostedHook).
func (l *Listener) Posted(transferID string, p activities.Posted) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.waiters[transferID] {
		select {
		case ch <- p:
		default: // already told
		}
	}
}
