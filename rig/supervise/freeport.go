package supervise

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
)

// FreeHostPort is a local address nothing listens on, as go.temporal.io/sdk/testsuite picks one:
// on Linux, the port is left in TIME_WAIT by a connection the listener's side closed, so that
// bind(:0) does not hand it to another process in the next minute while the dev server, which
// sets SO_REUSEADDR, can still bind it.
func FreeHostPort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("no free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	addr := l.Addr().(*net.TCPAddr)
	if runtime.GOOS != "darwin" && runtime.GOOS != "windows" {
		r, err := net.DialTCP("tcp", nil, addr)
		if err != nil {
			return "", fmt.Errorf("no free port: %w", err)
		}
		defer func() { _ = r.Close() }()
		c, err := l.Accept()
		if err != nil {
			return "", fmt.Errorf("no free port: %w", err)
		}
		_ = c.Close() // the listener's side first
	}
	return addr.String(), nil
}

// FreePort is FreeHostPort's port alone.
func FreePort() (string, error) {
	addr, err := FreeHostPort()
	if err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(addr)
	return port, err
}

// FreeLowPort is a port on 127.0.0.1 nothing listens on, below 32768, for the Temporal cluster:
// its server keeps its services' membership ports in a PostgreSQL smallint, which the kernel's
// ephemeral ports (those FreeHostPort gets from bind(:0)) overflow. The kernel never hands out
// one of these from bind(:0) either.
func FreeLowPort() (int, error) {
	for range 100 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			_ = l.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free port between 20000 and 32000")
}
