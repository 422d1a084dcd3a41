package operation

import (
	"sync"

	"github.com/payments/payments/internal/idempotency"
)

// Listener tells requests waiting in this process the moment an operation's answer commits: the
// worker's answer hook under `payments serve`, where API and worker share a process, saving a
// round trip through Temporal or PostgreSQL. The answer is the same stored bytes either way.
type Listener struct {
	mu      sync.Mutex
	waiters map[string][]chan idempotency.Response
}

// NewListener returns a Listener no one listens to yet.
func NewListener() *Listener { return &Listener{waiters: map[string][]chan idempotency.Response{}} }

// Listen returns a channel that receives the answer of operation id, if it commits in this
// process; call stop when no longer listening.
func (l *Listener) Listen(id string) (answered <-chan idempotency.Response, stop func()) {
	ch := make(chan idempotency.Response, 1)
	l.mu.Lock()
	l.waiters[id] = append(l.waiters[id], ch)
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		ws := l.waiters[id]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(l.waiters, id)
		} else {
			l.waiters[id] = ws
		}
	}
}

// Answered tells those listening to operation id its answer (activities.AnswerHook).
func (l *Listener) Answered(id string, r idempotency.Response) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.waiters[id] {
		select {
		case ch <- r:
		default: // already told
		}
	}
}
