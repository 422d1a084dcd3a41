package supervise

import (
	"fmt"
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
