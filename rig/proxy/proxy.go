// Package proxy forwards TCP connections to a target (PostgreSQL, Temporal) and breaks the path
// on purpose, for the fault tests and the chaos run.
package proxy

import (
	"net"
	"sync"
)

// Proxy forwards TCP connections to a target and breaks the path on purpose: Cut drops every connection and refuses new ones until Restore; Freeze stops
// moving bytes, so whatever a process sends is neither delivered nor refused.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	cut     bool
	frozen  bool
	replies bool // frozen one way: what the target sends back is held, what it is sent goes through
	thaw    *sync.Cond
	conns   map[net.Conn]bool
}

// New listens on a free loopback port and forwards to target until Close.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]bool{}}
	p.thaw = sync.NewCond(&p.mu)
	go p.accept()
	return p, nil
}

// Close stops listening and drops every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
}

// Addr is the host:port to connect to instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			c.Close() // refused: the client sees the connection drop at once
			continue
		}
		go p.forward(c)
	}
}

func (p *Proxy) forward(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, server) {
		return
	}
	go p.pipe(server, client, false)
	p.pipe(client, server, true)
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		if p.cut {
			c.Close()
			continue
		}
		p.conns[c] = true
	}
	return !p.cut
}

// pipe copies src to dst, holding each chunk while the proxy is frozen (reply: src is the
// target, and replies are held too while FreezeReplies holds them).
func (p *Proxy) pipe(dst, src net.Conn, reply bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.frozen || (reply && p.replies) {
				p.thaw.Wait()
			}
			dropped := p.cut
			p.mu.Unlock()
			if dropped {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Cut closes every open connection, discarding what Freeze held, and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.frozen, p.replies = true, false, false
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
	p.thaw.Broadcast()
}

// Restore accepts and forwards connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.frozen, p.replies = false, false, false
	p.thaw.Broadcast()
}

// Freeze stops forwarding: bytes already read are held, connections stay open.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

// FreezeReplies holds what the target sends back, while what is sent to it still goes through:
// a database commits the transactions whose COMMIT arrives, and nobody hears that it did.
func (p *Proxy) FreezeReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.replies = true
}
