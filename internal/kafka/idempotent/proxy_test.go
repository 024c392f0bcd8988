package idempotent

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// ackDropper is a loopback TCP proxy in front of every broker the producer
// talks to. It forwards Kafka frames unchanged, except that for the produce
// requests whose 1-based count (across all connections) is in drop, it
// forwards the request to the broker and then swallows the broker's
// response and closes the connection: a lost acknowledgement, with the
// write already done on the broker.
//
// The broker's metadata names the brokers' real addresses; the producer
// reaches them through Dial, which sends every address to that address's
// proxy (created on first use). Only this test dialer knows about the
// proxy; the producer just takes a Dial function.
type ackDropper struct {
	t    testing.TB
	drop map[int64]bool

	produces atomic.Int64 // produce requests seen
	dropped  atomic.Int64 // responses swallowed
	dropAll  atomic.Bool  // while set, swallow every produce response

	mu      sync.Mutex
	proxies map[string]string // broker address -> proxy address
	conns   []net.Conn
	lns     []net.Listener
	wg      sync.WaitGroup
}

func newAckDropper(t testing.TB, drop ...int64) *ackDropper {
	d := &ackDropper{t: t, drop: map[int64]bool{}, proxies: map[string]string{}}
	for _, n := range drop {
		d.drop[n] = true
	}
	t.Cleanup(d.close)
	return d
}

// Dial is a Config.Dial that connects through the proxy of address.
func (d *ackDropper) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	proxy, err := d.proxyFor(address)
	if err != nil {
		return nil, err
	}
	var dialer net.Dialer
	return dialer.DialContext(ctx, network, proxy)
}

func (d *ackDropper) proxyFor(target string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proxies == nil {
		return "", net.ErrClosed
	}
	if p, ok := d.proxies[target]; ok {
		return p, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	d.lns = append(d.lns, ln)
	d.proxies[target] = ln.Addr().String()
	d.wg.Go(func() { d.accept(ln, target) })
	return ln.Addr().String(), nil
}

func (d *ackDropper) accept(ln net.Listener, target string) {
	for {
		client, err := ln.Accept()
		if err != nil {
			return
		}
		upstream, err := net.Dial("tcp", target)
		if err != nil {
			client.Close()
			continue
		}
		if !d.track(client, upstream) {
			return
		}
		var (
			mu   sync.Mutex
			drop = map[int32]bool{} // correlation ids whose response is swallowed
		)
		closeBoth := func() { client.Close(); upstream.Close() }
		d.wg.Go(func() {
			defer closeBoth()
			for {
				frame, err := readFrame(client)
				if err != nil {
					return
				}
				// Request header: api key int16, api version int16,
				// correlation id int32. Produce is api key 0.
				if len(frame) >= 12 && binary.BigEndian.Uint16(frame[4:]) == 0 {
					if n := d.produces.Add(1); d.drop[n] || d.dropAll.Load() {
						mu.Lock()
						drop[int32(binary.BigEndian.Uint32(frame[8:]))] = true
						mu.Unlock()
					}
				}
				if _, err := upstream.Write(frame); err != nil {
					return
				}
			}
		})
		d.wg.Go(func() {
			defer closeBoth()
			for {
				frame, err := readFrame(upstream)
				if err != nil {
					return
				}
				// Response header starts with the correlation id.
				if len(frame) >= 8 {
					mu.Lock()
					lose := drop[int32(binary.BigEndian.Uint32(frame[4:]))]
					mu.Unlock()
					if lose {
						d.dropped.Add(1)
						return // closes both sides: the ack is gone
					}
				}
				if _, err := client.Write(frame); err != nil {
					return
				}
			}
		})
	}
}

// track records conns for close; it reports false once closing began.
func (d *ackDropper) track(conns ...net.Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proxies == nil {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	d.conns = append(d.conns, conns...)
	return true
}

func (d *ackDropper) close() {
	d.mu.Lock()
	for _, ln := range d.lns {
		ln.Close()
	}
	for _, c := range d.conns {
		c.Close()
	}
	d.proxies = nil
	d.mu.Unlock()
	d.wg.Wait()
}

// readFrame reads one size-prefixed Kafka frame, prefix included.
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > 64<<20 {
		return nil, errors.New("frame too large")
	}
	frame := make([]byte, 4+n)
	copy(frame, size[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return nil, err
	}
	return frame, nil
}
