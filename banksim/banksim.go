// Package banksim is the bank simulator that `payments banksim` runs (docs/bank.md): a payment
// rail with its own state, idempotency, lifecycle, signed callbacks and injected faults. It is
// the outside world to the processor, so it uses nothing of this repository: where the two
// disagree (a signature, a field), the tests see it.
package banksim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Config is how a simulator starts.
type Config struct {
	CallbackURL string // where events are POSTed; must resolve to loopback only
	Secret      string // signs the callbacks (PAYMENTS_BANK_SECRET)
	StateFile   string // JSON state, written after every change; "" keeps the state in memory
	Seed        uint64 // of every random choice
	Faults      Faults
	Log         *slog.Logger // nil: discard

	// signTime is the clock of the signatures' t (tests make it tick so that a resend within
	// the same second is still signed differently); nil is time.Now.
	signTime func() time.Time
}

// Sim is a running simulator: its state, its timers (settlements, returns) and its callbacks
// in flight. Its HTTP side is Handler; Close stops it.
type Sim struct {
	cfg    Config
	log    *slog.Logger
	dice   *dice
	client *http.Client
	ctx    context.Context // cancelled by Close: ends deliveries in flight
	cancel context.CancelFunc

	fmu       sync.Mutex // guards faults and downUntil
	faults    Faults
	downUntil time.Time

	mu      sync.Mutex // guards everything below, and the state file
	st      state
	ix      index
	timers  map[string]*time.Timer // "settle/<id>", "return/<id>"
	running map[string]int         // rounds of delivery in flight, per event
	closed  bool
	wg      sync.WaitGroup // delivery goroutines
}

// New loads the state file (if any), settles what fell due while the simulator was stopped,
// and resumes the deliveries a stop interrupted.
func New(cfg Config) (*Sim, error) {
	if cfg.Secret == "" {
		return nil, errors.New("a callback signing secret is required (PAYMENTS_BANK_SECRET)")
	}
	if err := CheckCallbackURL(cfg.CallbackURL); err != nil {
		return nil, err
	}
	if err := cfg.Faults.Validate(); err != nil {
		return nil, err
	}
	if cfg.StateFile != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.StateFile), 0o755); err != nil {
			return nil, err
		}
	}
	st, err := load(cfg.StateFile)
	if err != nil {
		return nil, err
	}
	// Fail now, not at the first payment, when the state file cannot be written.
	if err := save(cfg.StateFile, &st); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.signTime == nil {
		cfg.signTime = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sim{
		cfg: cfg, log: cfg.Log, dice: newDice(cfg.Seed), client: loopbackClient(), ctx: ctx, cancel: cancel,
		faults: cfg.Faults, downUntil: time.Now().Add(cfg.Faults.DownFor),
		st: st, ix: st.index(), timers: map[string]*time.Timer{}, running: map[string]int{},
	}
	s.resume()
	return s, nil
}

// Close stops the timers and the deliveries in flight and writes the state a last time. What
// was pending stays pending in the state file: the next start carries on.
func (s *Sim) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, t := range s.timers {
		t.Stop()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return save(s.cfg.StateFile, &s.st)
}

// knobs is the current faults.
func (s *Sim) knobs() Faults {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.faults
}

func (s *Sim) down() bool {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return time.Now().Before(s.downUntil)
}

// Run serves the simulator on addr (loopback only) until ctx ends, then stops accepting, lets
// the requests in flight finish and writes the state.
func Run(ctx context.Context, addr string, cfg Config) error {
	sim, err := New(cfg)
	if err != nil {
		return err
	}
	ln, err := Listen(addr)
	if err != nil {
		_ = sim.Close()
		return err
	}
	hs := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 1)
	go func() { errs <- hs.Serve(ln) }()
	sim.log.Info("banksim listening", "addr", ln.Addr().String(), "callback_url", cfg.CallbackURL,
		"state", cfg.StateFile, "seed", cfg.Seed, "faults", sim.knobs())
	select {
	case err = <-errs:
		err = fmt.Errorf("banksim: %w", err)
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = hs.Shutdown(shutdownCtx)
		cancel()
	}
	if cerr := sim.Close(); err == nil {
		err = cerr
	}
	sim.log.Info("banksim stopped")
	return err
}

// LoopbackAddr checks that addr (host:port) is a loopback address and returns the address to
// listen on: localhost becomes 127.0.0.1, so that no resolver can send it elsewhere. An empty
// host (all interfaces) is refused.
func LoopbackAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("address %q: %v", addr, err)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("address %q: the simulator listens on loopback only (localhost, 127.0.0.0/8, ::1)", addr)
	}
	return net.JoinHostPort(host, port), nil
}

// Listen listens on addr, which must be a loopback address.
func Listen(addr string) (net.Listener, error) {
	a, err := LoopbackAddr(addr)
	if err != nil {
		return nil, err
	}
	return net.Listen("tcp", a)
}

// CheckCallbackURL accepts an http(s) URL whose host is, or resolves only to, loopback
// addresses. (Every connection is checked again when it is made: see loopbackClient.)
func CheckCallbackURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("callback URL: %v", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("callback URL %q: want http://host:port/path", raw)
	}
	host := u.Hostname()
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return fmt.Errorf("callback URL %q: %v", raw, err)
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("callback URL %q: %s is not a loopback address; the simulator sends to loopback only", raw, ip)
		}
	}
	if len(ips) == 0 {
		return fmt.Errorf("callback URL %q: %s resolves to no address", raw, host)
	}
	return nil
}
