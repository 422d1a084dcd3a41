// Package config reads the environment the processes are configured by (README, "Configuration").
package config

import (
	"fmt"
	"os"
	"time"
)

// Config is the whole configuration; every field has a default that works with `make run`.
type Config struct {
	DatabaseURL    string
	HTTPAddr       string
	MetricsAddr    string        // where `payments worker` serves /metrics
	SyncWait       time.Duration // how long POST /v1/transfers waits for the result before 202
	IdempotencyTTL time.Duration // how long a stored response is replayed
	RetryFor       time.Duration // how long a transfer retries technical failures before it fails
	Temporal       Temporal
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
}

// FromEnv reads the configuration from the environment.
func FromEnv() (Config, error) {
	c := Config{
		DatabaseURL: env("DATABASE_URL", "postgres://postgres@localhost:5432/payments?sslmode=disable"),
		HTTPAddr:    env("PAYMENTS_HTTP_ADDR", ":8080"),
		MetricsAddr: env("PAYMENTS_METRICS_ADDR", ":9090"),
		Temporal: Temporal{
			Address:   env("TEMPORAL_ADDRESS", "localhost:7233"),
			Namespace: env("TEMPORAL_NAMESPACE", "default"),
			APIKey:    os.Getenv("TEMPORAL_API_KEY"),
			TLSCert:   os.Getenv("TEMPORAL_TLS_CERT"),
			TLSKey:    os.Getenv("TEMPORAL_TLS_KEY"),
			TLSCA:     os.Getenv("TEMPORAL_TLS_CA"),
			TLSServer: os.Getenv("TEMPORAL_TLS_SERVER_NAME"),
		},
	}
	var err error
	for _, d := range []struct {
		name string
		def  time.Duration
		dst  *time.Duration
	}{
		{"PAYMENTS_SYNC_WAIT", 10 * time.Second, &c.SyncWait},
		{"PAYMENTS_IDEMPOTENCY_TTL", 24 * time.Hour, &c.IdempotencyTTL},
		{"PAYMENTS_TRANSFER_RETRY_FOR", 2 * time.Minute, &c.RetryFor},
	} {
		if *d.dst, err = duration(d.name, d.def); err != nil {
			return c, err
		}
	}
	return c, nil
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
