package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/payments/payments/internal/codec"
	"github.com/payments/payments/internal/config"
)

// runCodecServer is `codec-server`: Temporal's remote codec protocol for the Web UI and
// `temporal workflow show --codec-endpoint`, with the keys of PAYMENTS_CODEC_KEYS (contract §10).
func runCodecServer(ctx context.Context, args []string, _ io.Writer) error {
	if err := parse(newFlags("codec-server"), args); err != nil {
		return err
	}
	cfg, err := config.FromEnv()
	if err != nil {
		return usagef("%v", err)
	}
	if cfg.Temporal.Keys == nil {
		return usagef("codec-server: PAYMENTS_CODEC_KEYS is not set: it decodes with the keys the workers encrypt with")
	}
	s := cfg.CodecServer
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("codec-server: %w", err)
	}
	hs := &http.Server{Handler: codec.Handler(cfg.Temporal.Keys, s.UIOrigins, s.Token), ReadHeaderTimeout: 10 * time.Second}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	log.Info("codec server listening", "addr", ln.Addr().String(), "ui_origins", s.UIOrigins, "token", s.Token != "",
		"key_id", cfg.Temporal.Keys.KeyID())
	return serveUntil(ctx, "codec-server", hs, ln, 5*time.Second)
}
