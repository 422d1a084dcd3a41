package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"go.temporal.io/sdk/client"

	"github.com/payments/payments/internal/codec"
)

// ClientOptions turns the Temporal settings into SDK client options: plain gRPC, mTLS, or TLS with
// an API key (Temporal Cloud); every payload and failure sealed with Keys, when set.
func (t Temporal) ClientOptions() (client.Options, error) {
	opts := client.Options{HostPort: t.Address, Namespace: t.Namespace}
	codec.Configure(&opts, t.Keys)
	if t.TLSCert == "" && t.TLSCA == "" && t.APIKey == "" {
		return opts, nil
	}
	tlsCfg := &tls.Config{ServerName: t.TLSServer, MinVersion: tls.VersionTLS12}
	if t.TLSCert != "" || t.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(t.TLSCert, t.TLSKey)
		if err != nil {
			return opts, fmt.Errorf("TEMPORAL_TLS_CERT/TEMPORAL_TLS_KEY: %w", err)
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	if t.TLSCA != "" {
		pem, err := os.ReadFile(t.TLSCA)
		if err != nil {
			return opts, fmt.Errorf("TEMPORAL_TLS_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return opts, fmt.Errorf("TEMPORAL_TLS_CA: no certificate in %s", t.TLSCA)
		}
		tlsCfg.RootCAs = pool
	}
	opts.ConnectionOptions.TLS = tlsCfg
	if t.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(t.APIKey)
	}
	return opts, nil
}
