package activities

import "sync"

// Posted tells waiters in this process the moment a transfer's posting commits. `payments
// serve` runs the API and the worker in one process: the API then answers as soon as the
// ledger holds the transfer's final answer, instead of a persistence round trip later when
// Temporal has recorded the workflow's completion. The answer is the same stored bytes either
// way, and the workflow still completes (a crash in between re-runs the posting, which finds
// the transfer final).
type Posted struct {
	mu      sync.Mutex
	waiters map[string][]chan TransferOutcome
}

// NewPosted returns an empty Posted.
func NewPosted() *Posted { return &Posted{waiters: map[string][]chan TransferOutcome{}} }

// Wait returns a channel that receives the outcome of transferID's posting, if it commits in
// this process; call stop when no longer waiting.
func (p *Posted) Wait(transferID string) (outcome <-chan TransferOutcome, stop func()) {
	ch := make(chan TransferOutcome, 1)
	p.mu.Lock()
	p.waiters[transferID] = append(p.waiters[transferID], ch)
	p.mu.Unlock()
	return ch, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		ws := p.waiters[transferID]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(p.waiters, transferID)
		} else {
			p.waiters[transferID] = ws
		}
	}
}

func (p *Posted) publish(transferID string, out TransferOutcome) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range p.waiters[transferID] {
		select {
		case ch <- out:
		default: // already told
		}
	}
}
