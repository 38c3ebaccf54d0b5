package main

import (
	"io"
	"net"
	"sync"
)

// relay is the offline gateway's network path to the hub: a TCP relay on
// loopback that the demo cuts (open connections closed, new ones closed
// as they come) and restores.
type relay struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	down   bool
	closed bool
	conns  map[net.Conn]struct{}
}

func newRelay(target string) (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	r.wg.Go(r.accept)
	return r, nil
}

// Addr is where the gateway dials the hub.
func (r *relay) Addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(c) {
			c.Close()
			continue
		}
		r.wg.Go(func() { r.pipe(c) })
	}
}

// track adds c to the open connections, or says the link is down.
func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down || r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

// pipe relays one connection to the hub and back until either side ends
// or the link is cut.
func (r *relay) pipe(c net.Conn) {
	defer r.untrack(c)
	hub, err := net.Dial("tcp", r.target)
	if err != nil {
		return
	}
	if !r.track(hub) {
		hub.Close()
		return
	}
	defer r.untrack(hub)
	done := make(chan struct{}, 2)
	go func() { io.Copy(hub, c); done <- struct{}{} }()
	go func() { io.Copy(c, hub); done <- struct{}{} }()
	<-done
	c.Close()
	hub.Close()
	<-done
}

// cut takes the link down (every connection closed) or up again.
func (r *relay) cut(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
	if down {
		for c := range r.conns {
			c.Close()
		}
	}
}

// Close ends the relay and every connection through it.
func (r *relay) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.ln.Close()
	r.wg.Wait()
	return err
}
