package api

import (
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimits is a token bucket per API key (contract §10), with a burst of twice PerSecond. The
// buckets live in this process, so n API processes let a key send n times the rate
// (docs/security.md says why: a bucket in PostgreSQL is a write per request). nil limits nothing.
type RateLimits struct {
	PerSecond float64

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	*rate.Limiter
	used time.Time
}

// idleBucket is how long a key's bucket is kept unused: by then it is full again, so dropping
// it changes nothing, and a process that has seen many keys does not keep them all.
const idleBucket = 10 * time.Minute

// Take takes one request from key's bucket at now: 0 when it may go, or how long until it could.
// A refused request takes nothing.
func (r *RateLimits) Take(key string, now time.Time) time.Duration {
	if r == nil || r.PerSecond <= 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buckets == nil {
		r.buckets = map[string]*bucket{}
	}
	if now.Sub(r.swept) > idleBucket {
		for k, b := range r.buckets {
			if now.Sub(b.used) > idleBucket {
				delete(r.buckets, k)
			}
		}
		r.swept = now
	}
	b := r.buckets[key]
	if b == nil {
		b = &bucket{Limiter: rate.NewLimiter(rate.Limit(r.PerSecond), max(1, int(2*r.PerSecond)))}
		r.buckets[key] = b
	}
	b.used = now
	res := b.ReserveN(now, 1)
	if wait := res.DelayFrom(now); wait > 0 {
		res.CancelAt(now)
		return wait
	}
	return 0
}

// Rate is the rate as the 429's detail says it.
func (r *RateLimits) Rate() string { return strconv.FormatFloat(r.PerSecond, 'f', -1, 64) }
