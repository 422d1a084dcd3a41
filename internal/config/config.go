// Package config reads the environment the processes are configured by (README, "Configuration").
package config

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/payments/payments/internal/keyring"
)

// Config is the whole configuration; every field has a default that works with `make run`.
type Config struct {
	DatabaseURL    string
	HTTPAddr       string
	MetricsAddr    string        // where `payments worker` serves /metrics
	SyncWait       time.Duration // how long POST /v1/transfers waits for the result before 202
	IdempotencyTTL time.Duration // how long a stored response is replayed
	RetryFor       time.Duration // how long a transfer retries technical failures before it fails
	RateLimit      float64       // PAYMENTS_RATE_LIMIT: requests a second per API key, with a burst of twice that
	Temporal       Temporal
	Bank           Bank
	Webhooks       Webhooks
	CodecServer    CodecServer
	Approvals      Approvals
}

// Approvals says which payouts wait for a second person (contract §9) and for how long.
type Approvals struct {
	ThresholdMinor int64         // PAYMENTS_APPROVAL_THRESHOLD_MINOR: payouts of at least this wait for approval; 0: none do
	Timeout        time.Duration // PAYMENTS_APPROVAL_TIMEOUT: how long one waits before it fails
}

// CodecServer says where `payments codec-server` listens and whom it answers (contract §10).
type CodecServer struct {
	Addr  string // PAYMENTS_CODEC_ADDR
	Token string // PAYMENTS_CODEC_TOKEN: the bearer token every request must carry, if set
	// PAYMENTS_CODEC_UI_ORIGINS: the Web UI's origins, comma-separated, the only ones a browser
	// may call it from
	UIOrigins []string
}

// DefaultCodecAddr is PAYMENTS_CODEC_ADDR's default: loopback.
const DefaultCodecAddr = Loopback + ":8089"

// Webhooks says how events are delivered to clients' endpoints (docs/contract.md §7).
type Webhooks struct {
	RetryFor      time.Duration // PAYMENTS_WEBHOOK_RETRY_FOR: how long an event is tried before its delivery run gives up
	AllowInsecure bool          // PAYMENTS_WEBHOOK_ALLOW_INSECURE: http, loopback and private addresses allowed
	Timeout       time.Duration // PAYMENTS_WEBHOOK_TIMEOUT: how long one attempt may take
	LoopbackOnly  bool          // deliveries to loopback only (the tests'; no variable sets it)
}

// Bank says how to reach the bank and how patient to be with it (docs/bank.md).
type Bank struct {
	URL          string        // PAYMENTS_BANK_URL
	Secret       string        // PAYMENTS_BANK_SECRET: verifies its callbacks
	RetryFor     time.Duration // how long a payout keeps giving the bank its instruction before its run fails
	PollAfter    time.Duration // how long a payout waits for a callback before asking the bank
	ReturnWindow time.Duration // how long after it is paid a payout still awaits a return
}

// Temporal says how to reach the Temporal cluster.
type Temporal struct {
	Address   string
	Namespace string
	APIKey    string // Temporal Cloud API key
	TLSCert   string // client certificate and key files for mTLS
	TLSKey    string
	TLSCA     string // CA bundle of a server certificate not in the system roots
	TLSServer string // server name to verify, when it differs from the address
	// Keys (PAYMENTS_CODEC_KEYS) seal every payload written to Temporal and open what was
	// sealed (internal/codec); nil when the variable is not set.
	Keys *keyring.Ring
}

// The ports the processes listen on, on Loopback unless PAYMENTS_HTTP_ADDR and
// PAYMENTS_METRICS_ADDR say otherwise (contract §10; docker-compose.yml gives 0.0.0.0).
const (
	HTTPPort    = "8080"
	MetricsPort = "9090"
)

// Loopback is the one address make run and make run-cluster listen on: their demo keys are well
// known and their webhooks may aim at local services, so they must not be reachable from outside.
const Loopback = "127.0.0.1"

// FromEnv reads the configuration from the environment.
func FromEnv() (Config, error) {
	c := Config{
		DatabaseURL: env("DATABASE_URL", "postgres://postgres@localhost:5432/payments?sslmode=disable"),
		HTTPAddr:    env("PAYMENTS_HTTP_ADDR", Loopback+":"+HTTPPort),
		MetricsAddr: env("PAYMENTS_METRICS_ADDR", Loopback+":"+MetricsPort),
		Temporal: Temporal{
			Address:   env("TEMPORAL_ADDRESS", "localhost:7233"),
			Namespace: env("TEMPORAL_NAMESPACE", "default"),
			APIKey:    os.Getenv("TEMPORAL_API_KEY"),
			TLSCert:   os.Getenv("TEMPORAL_TLS_CERT"),
			TLSKey:    os.Getenv("TEMPORAL_TLS_KEY"),
			TLSCA:     os.Getenv("TEMPORAL_TLS_CA"),
			TLSServer: os.Getenv("TEMPORAL_TLS_SERVER_NAME"),
		},
		Bank: Bank{URL: env("PAYMENTS_BANK_URL", "http://localhost:8090"), Secret: os.Getenv("PAYMENTS_BANK_SECRET")},
		CodecServer: CodecServer{Addr: env("PAYMENTS_CODEC_ADDR", DefaultCodecAddr), Token: os.Getenv("PAYMENTS_CODEC_TOKEN"),
			UIOrigins: strings.Split(env("PAYMENTS_CODEC_UI_ORIGINS", "http://"+Loopback+":8233,http://localhost:8233"), ",")},
	}
	var err error
	if keys := os.Getenv("PAYMENTS_CODEC_KEYS"); keys != "" {
		if c.Temporal.Keys, err = keyring.Parse(keys); err != nil {
			return c, fmt.Errorf("PAYMENTS_CODEC_KEYS: %w", err)
		}
	}
	for _, d := range []struct {
		name string
		def  time.Duration
		dst  *time.Duration
	}{
		{"PAYMENTS_SYNC_WAIT", 10 * time.Second, &c.SyncWait},
		{"PAYMENTS_IDEMPOTENCY_TTL", 24 * time.Hour, &c.IdempotencyTTL},
		{"PAYMENTS_TRANSFER_RETRY_FOR", 2 * time.Minute, &c.RetryFor},
		{"PAYMENTS_BANK_RETRY_FOR", 24 * time.Hour, &c.Bank.RetryFor},
		{"PAYMENTS_BANK_POLL_AFTER", time.Minute, &c.Bank.PollAfter},
		{"PAYMENTS_PAYOUT_RETURN_WINDOW", 7 * 24 * time.Hour, &c.Bank.ReturnWindow},
		{"PAYMENTS_WEBHOOK_RETRY_FOR", 72 * time.Hour, &c.Webhooks.RetryFor},
		{"PAYMENTS_WEBHOOK_TIMEOUT", 10 * time.Second, &c.Webhooks.Timeout},
		{"PAYMENTS_APPROVAL_TIMEOUT", 72 * time.Hour, &c.Approvals.Timeout},
	} {
		if *d.dst, err = duration(d.name, d.def); err != nil {
			return c, err
		}
	}
	// An attempt must end well within the delivery activity's heartbeat timeout (2 minutes).
	if c.Webhooks.Timeout == 0 || c.Webhooks.Timeout > time.Minute {
		return c, fmt.Errorf("PAYMENTS_WEBHOOK_TIMEOUT=%s: want more than 0 and at most 1m", c.Webhooks.Timeout)
	}
	if c.Approvals.Timeout < time.Second {
		return c, fmt.Errorf("PAYMENTS_APPROVAL_TIMEOUT=%s: want at least 1s", c.Approvals.Timeout)
	}
	if c.Approvals.ThresholdMinor, err = minorUnits("PAYMENTS_APPROVAL_THRESHOLD_MINOR"); err != nil {
		return c, err
	}
	if c.RateLimit, err = positive("PAYMENTS_RATE_LIMIT", DefaultRateLimit); err != nil {
		return c, err
	}
	c.Webhooks.AllowInsecure, err = boolean("PAYMENTS_WEBHOOK_ALLOW_INSECURE")
	return c, err
}

// DefaultRateLimit is PAYMENTS_RATE_LIMIT's default (contract §10).
const DefaultRateLimit = 100

func positive(name string, def float64) (float64, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s=%q: want a number of requests a second above 0, such as 100", name, v)
	}
	return f, nil
}

// minorUnits reads an amount in minor units above 0; unset is 0 (none).
func minorUnits(name string) (int64, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want an amount in minor units above 0, such as 100000", name, v)
	}
	return n, nil
}

func boolean(name string) (bool, error) {
	switch v := os.Getenv(name); v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	default:
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func duration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 10s or 24h", name, v)
	}
	return d, nil
}
