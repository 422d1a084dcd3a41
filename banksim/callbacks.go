package banksim

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxAttempts is how many times one round of delivery sends an event (docs/bank.md).
const maxAttempts = 10

// sign is the Bank-Signature header of body at t: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>.
func sign(secret string, t int64, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	ts := strconv.FormatInt(t, 10)
	mac.Write([]byte(ts + "." + body))
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// announceLocked starts copies rounds of delivery of ev, each after its own random delay up
// to --callback-delay, so that two events of one payment may arrive out of order.
func (s *Sim) announceLocked(ev *Event, copies int) {
	maxDelay := s.knobs().CallbackDelay
	for range copies {
		s.startLocked(ev, s.dice.upTo(maxDelay))
	}
}

// resend is POST /admin/events/{id}/resend: one more round of delivery, now.
func (s *Sim) resend(id string) (Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev, ok := s.ix.eventOf[id]
	if !ok {
		return Event{}, errNotFound
	}
	if ev.Delivery != deliveryDelivered {
		ev.Delivery = deliveryPending // a dropped or failed event is on its way after all
		if err := save(s.cfg.StateFile, &s.st); err != nil {
			s.log.Error("state file", "err", err)
		}
	}
	s.startLocked(ev, 0)
	out := *ev
	out.Attempts = slices.Clone(ev.Attempts) // the deliveries append to the original
	return out, nil
}

// startLocked starts one round of delivery of ev after delay. Nothing starts once Close began:
// the event stays pending in the state, and the next start sends it.
func (s *Sim) startLocked(ev *Event, delay time.Duration) {
	if s.closed {
		return
	}
	s.running[ev.ID]++
	s.wg.Add(1)
	id, typ, body := ev.ID, ev.Type, ev.Body // immutable: read without the lock later
	go func() {
		defer s.wg.Done()
		s.roundEnded(id, s.deliver(id, typ, body, delay))
	}()
}

// deliver sends one event until an answer is 2xx, up to maxAttempts times, waiting
// --callback-retry-base, then twice that, and so on between attempts. It reports whether it
// gave up (false when delivered, or when the simulator is stopping).
func (s *Sim) deliver(id, typ, body string, delay time.Duration) (gaveUp bool) {
	if !sleep(s.ctx, delay) {
		return false
	}
	for try := 1; ; try++ {
		status, err := s.post(body)
		if s.ctx.Err() != nil {
			return false // stopping: not an answer from the processor
		}
		a := Attempt{At: now(), Try: try, Status: status}
		if err != nil {
			a.Error = err.Error()
		}
		ok := err == nil && status/100 == 2
		var wait time.Duration
		if !ok && try < maxAttempts {
			wait = s.knobs().CallbackRetryBase << (try - 1)
		}
		s.recordAttempt(id, a, ok)
		attrs := []any{"event_id", id, "type", typ, "try", try, "delivered", ok}
		if err != nil {
			attrs = append(attrs, "err", a.Error)
		} else {
			attrs = append(attrs, "status", status)
		}
		if wait > 0 {
			attrs = append(attrs, "retry_in", wait.String())
		}
		s.log.Info("callback", attrs...)
		switch {
		case ok:
			return false
		case try == maxAttempts:
			return true
		case !sleep(s.ctx, wait):
			return false
		}
	}
}

// post sends body to the callback URL with a fresh signature and returns the HTTP status.
func (s *Sim) post(body string) (int, error) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.cfg.CallbackURL, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "payments-banksim")
	req.Header.Set("Bank-Signature", sign(s.cfg.Secret, s.cfg.signTime().Unix(), body))
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	// Read the answer so that the connection is reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// recordAttempt keeps an attempt in the event's history (GET /admin/events).
func (s *Sim) recordAttempt(id string, a Attempt, delivered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := s.ix.eventOf[id]
	ev.Attempts = append(ev.Attempts, a)
	if delivered {
		ev.Delivery = deliveryDelivered
	}
	if err := save(s.cfg.StateFile, &s.st); err != nil {
		s.log.Error("state file", "err", err)
	}
}

// roundEnded counts a round of delivery out; when the last one gave up without any 2xx, the
// event has failed.
func (s *Sim) roundEnded(id string, gaveUp bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[id]--
	if s.running[id] > 0 {
		return
	}
	delete(s.running, id)
	if ev := s.ix.eventOf[id]; gaveUp && ev.Delivery == deliveryPending {
		ev.Delivery = deliveryFailed
		if err := save(s.cfg.StateFile, &s.st); err != nil {
			s.log.Error("state file", "err", err)
		}
	}
}

// sleep waits d, or less when ctx ends; it reports whether it waited the whole time.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// loopbackClient is the only way the simulator sends anything. It connects to loopback
// addresses only, checked on the address actually dialled (after name resolution), ignores
// proxy settings and follows no redirect: a mistake in a URL cannot reach another host.
func loopbackClient() *http.Client {
	dialer := &net.Dialer{
		Timeout: 5 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return fmt.Errorf("refusing to connect to %s: not a loopback address", address)
			}
			return nil
		},
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         dialer.DialContext,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
