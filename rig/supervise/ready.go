package supervise

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// WaitReady calls probe every interval until it answers (returns nil). It gives up when parent
// ends (with its cause), when within has passed (unless within is 0: probe's context ends then),
// or when gone says the process that should answer is gone (a Child's Err; nil: nothing to
// watch), with probe's last error. what names that process in the errors.
func WaitReady(parent context.Context, what string, within, interval time.Duration, gone func() error, probe func(context.Context) error) error {
	ctx := parent
	if within > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(parent, within)
		defer cancel()
	}
	for {
		last := probe(ctx)
		if last == nil {
			return nil
		}
		if gone != nil {
			if err := gone(); err != nil {
				return fmt.Errorf("%s did not answer: %w; last: %v", what, err, last)
			}
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return context.Cause(parent)
			}
			return fmt.Errorf("%s did not answer within %v: %w", what, within, last)
		case <-time.After(interval):
		}
	}
}

// probeClient asks a process whether it is ready; one that takes longer is asked again.
var probeClient = &http.Client{Timeout: 5 * time.Second}

// HTTPReady is a probe for WaitReady: a GET of url answered 200.
func HTTPReady(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// TCPReady is a probe for WaitReady: addr takes a TCP connection.
func TCPReady(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = conn.Close()
		}
		return err
	}
}
