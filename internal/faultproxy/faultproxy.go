// Package faultproxy is a loopback TCP proxy that breaks connections on
// purpose, for tests and fault runs: put it between the service and
// PostgreSQL, the payment provider or its clients, and make that link
// refuse, reset, hang, lose answers or slow down, in the middle of real
// traffic.
//
// It knows nothing of the protocols it carries: it moves bytes, and a fault
// is a decision about bytes and connections.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Mode says what the proxy does with connections.
type Mode int

const (
	// Pass forwards both directions.
	Pass Mode = iota
	// Refuse stops listening: new connections are refused by the kernel
	// (ECONNREFUSED), as when the peer's process is down. Live
	// connections are cut.
	Refuse
	// Reset accepts new connections and resets them at once.
	Reset
	// Blackhole accepts new connections and never forwards or answers
	// anything: the peer waits until its own timeout, as behind a dead
	// route.
	Blackhole
	// LoseResponses forwards what the client sends, and when the upstream
	// starts to answer, drops the answer and closes the connection: the
	// request was processed, the client never learns how.
	LoseResponses
	// HoldResponses forwards what the client sends and never delivers the
	// upstream's answer, nor its end: the connection stays open until the
	// client gives up, as when the way back is dead. The request was
	// processed; the client learns nothing until its own timeout.
	HoldResponses
)

func (m Mode) String() string {
	return [...]string{"pass", "refuse", "reset", "blackhole", "lose-responses", "hold-responses"}[m]
}

// Proxy forwards a loopback TCP port to an upstream address.
type Proxy struct {
	network, upstream string // where connections go, e.g. "unix", "/tmp/x/.s.PGSQL.5432"
	addr              string // the loopback address the proxy listens on

	mu     sync.Mutex
	ln     net.Listener // nil while refusing
	mode   Mode
	delay  time.Duration
	links  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
}

// New starts a proxy on 127.0.0.1 (a free port) in front of upstream.
func New(network, upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{network: network, upstream: upstream, addr: ln.Addr().String(), links: map[*link]struct{}{}}
	p.serve(ln)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// SetMode switches the proxy's behaviour for new connections and, for
// Refuse, Reset and Blackhole, cuts the live ones (a partition cuts
// everything). Switching back to any other mode listens again on the same
// address.
func (p *Proxy) SetMode(m Mode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("faultproxy: closed")
	}
	p.mode = m
	if m == Refuse || m == Reset || m == Blackhole {
		p.cutLocked()
	}
	switch {
	case m == Refuse && p.ln != nil:
		_ = p.ln.Close()
		p.ln = nil
	case m != Refuse && p.ln == nil:
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			return fmt.Errorf("faultproxy: listen again on %s: %w", p.addr, err)
		}
		p.serveLocked(ln)
	}
	return nil
}

// SetDelay makes every chunk of bytes wait d before it is forwarded, in
// both directions.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Cut resets every live connection; new ones follow the mode.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutLocked()
}

// Close stops the proxy and cuts every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.cutLocked()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) cutLocked() {
	for l := range p.links {
		reset(l.client)
		if l.server != nil {
			_ = l.server.Close()
		}
		delete(p.links, l)
	}
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serveLocked(ln)
}

func (p *Proxy) serveLocked(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed: Refuse or Close
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.handle(c)
			}()
		}
	}()
}

func (p *Proxy) handle(client net.Conn) {
	p.mu.Lock()
	mode, closed := p.mode, p.closed
	p.mu.Unlock()
	switch {
	case closed || mode == Reset || mode == Refuse:
		reset(client)
		return
	case mode == Blackhole:
		l := &link{client: client}
		if !p.track(l) {
			return
		}
		_, _ = io.Copy(io.Discard, client) // until the client gives up or Cut
		p.untrack(l)
		_ = client.Close()
		return
	}

	server, err := net.DialTimeout(p.network, p.upstream, 5*time.Second)
	if err != nil {
		reset(client)
		return
	}
	l := &link{client: client, server: server}
	if !p.track(l) {
		return
	}
	defer p.untrack(l)
	done, stop := make(chan struct{}, 2), make(chan struct{})
	go func() { p.pipe(server, client, false, stop); done <- struct{}{} }()
	go func() { p.pipe(client, server, true, stop); done <- struct{}{} }()
	<-done
	// One side ended: end both, so the other copy returns too.
	close(stop)
	_ = client.Close()
	_ = server.Close()
	<-done
}

// pipe copies src to dst. toClient marks the upstream-to-client direction,
// the one LoseResponses drops and HoldResponses holds until stop.
func (p *Proxy) pipe(dst, src net.Conn, toClient bool, stop <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		mode, delay := p.mode, p.delay
		p.mu.Unlock()
		if toClient && mode == HoldResponses {
			if err != nil {
				<-stop // the upstream is done; the client is not told
				return
			}
			continue
		}
		if n > 0 {
			if toClient && mode == LoseResponses {
				// The upstream has answered: the request was processed.
				// Lose the answer and the connection with it.
				reset(dst)
				return
			}
			if delay > 0 {
				time.Sleep(delay)
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

func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		reset(l.client)
		if l.server != nil {
			_ = l.server.Close()
		}
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.links, l)
}

// reset closes c with an RST rather than a FIN, as a crashed peer or a
// middlebox dropping state does.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
