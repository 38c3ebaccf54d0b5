package wire

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pollFD is a connection's socket once the poller serves it: a
// descriptor of its own (a dup of the net.Conn's, which is closed so that
// Go's poller no longer hears of the socket), non-blocking, read when the
// poller says it is readable and written without waiting.
type pollFD struct {
	mu sync.RWMutex // read-locked around each system call, locked to close: a closed number is never used
	fd int
}

// errWouldBlock is a pollFD's EAGAIN: nothing to read, no room to write.
var errWouldBlock = errors.New("wire: would block")

func (f *pollFD) read(b []byte) (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.fd < 0 {
		return 0, net.ErrClosed
	}
	for {
		n, err := syscall.Read(f.fd, b) // syscall's, as Go's own I/O: the race detector sees a write to a socket before a read of it
		switch err {
		case nil:
			return n, nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, errWouldBlock
		}
		return 0, err
	}
}

// write writes b until it is written or the socket's buffer is full
// (errWouldBlock, with what was written).
func (f *pollFD) write(b []byte) (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.fd < 0 {
		return 0, net.ErrClosed
	}
	done := 0
	for done < len(b) {
		n, err := syscall.Write(f.fd, b[done:])
		switch err {
		case nil:
			done += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			return done, errWouldBlock
		default:
			return done, err
		}
	}
	return done, nil
}

// poller serves connections past their first stream without a
// goroutine each: one goroutine waits on an epoll set of their sockets
// (edge-triggered), and hands each connection with something to read to
// a worker, which reads and handles all it has; then the poller sleeps
// Config.PollDelay, so that its next look takes what many connections
// sent meanwhile. A connection is with one worker at a time (conn.state).
//
// The set is not in Go's own poller: every event would wake that, the
// sleep notwithstanding, as a goroutine parked in a read did. The
// poller's goroutine waits in epoll_wait itself, a system call that
// leaves its thread, only when a look finds nothing; an eventfd in the
// set wakes it for stop.
type poller struct {
	s     *Server
	epfd  int
	wake  int // the eventfd
	mu    sync.Mutex
	conns map[int32]*conn // by socket
	done  chan struct{}   // run returned
}

func newPoller(s *Server) (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(wake)
		unix.Close(epfd)
		return nil, err
	}
	p := &poller{s: s, epfd: epfd, wake: wake, conns: map[int32]*conn{}, done: make(chan struct{})}
	go p.run()
	return p, nil
}

// add takes c's socket from its net.Conn and serves c from now on: the
// frames read so far (pending) first. False: c stays with its goroutine
// (c closed meanwhile, a keepalive ping being written to it: rare).
func (p *poller) add(c *conn) bool {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	fd := -1
	if cerr := raw.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil || err != nil {
		return false
	}
	// The dup shares the socket's flags: it is non-blocking as Go made
	// it. Registered before c has it: an event meanwhile finds c busy.
	c.state.Store(stateRunning) // the first process's, below
	p.mu.Lock()
	p.conns[int32(fd)] = c
	p.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}
	err = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
	c.mu.Lock()
	if err != nil || c.closed || c.writing {
		c.mu.Unlock()
		if err == nil {
			unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
		}
		p.mu.Lock()
		delete(p.conns, int32(fd))
		p.mu.Unlock()
		unix.Close(fd)
		c.state.Store(stateIdle)
		return false
	}
	c.pfd.Store(&pollFD{fd: fd})
	c.mu.Unlock()
	// start's buffer goes: frames moves what pending leaves into one of
	// the pool's.
	c.rbuf, c.rpos, c.rend, c.pending = c.pending, 0, len(c.pending), nil
	c.nc.Close() // Go's poller lets go of the socket; the dup holds it
	c.s.work <- task{fn: c.process}
	return true
}

// remove closes c's socket, once no system call uses it.
func (p *poller) remove(c *conn) {
	f := c.pfd.Load()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd < 0 {
		return
	}
	p.mu.Lock()
	delete(p.conns, int32(f.fd))
	p.mu.Unlock()
	unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, f.fd, nil)
	unix.Close(f.fd)
	f.fd = -1
}

// run waits for events, hands them on, and sleeps PollDelay after each
// look that found some, until stop.
func (p *poller) run() {
	defer close(p.done)
	events := make([]unix.EpollEvent, 512)
	ready := make([]*conn, 0, len(events))
	wait := 0 // epoll_wait's timeout: 0 after a sleep, -1 when a look found nothing
	for {
		n, err := unix.EpollWait(p.epfd, events, wait)
		if err != nil && err != unix.EINTR {
			p.s.cfg.Logger.Error("wire: epoll_wait: the poller stops", "err", err)
			return
		}
		n = max(n, 0)
		p.mu.Lock()
		for _, ev := range events[:n] {
			if ev.Fd == int32(p.wake) {
				p.mu.Unlock()
				return
			}
			c := p.conns[ev.Fd]
			if c == nil {
				continue
			}
			if ev.Events&unix.EPOLLOUT != 0 {
				c.writable()
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 && c.readable() {
				ready = append(ready, c)
			}
		}
		p.mu.Unlock()
		for i, c := range ready {
			p.s.work <- task{fn: c.process}
			ready[i] = nil
		}
		ready = ready[:0]
		switch {
		case n == len(events):
			wait = 0
		case n > 0:
			time.Sleep(p.s.cfg.PollDelay)
			wait = 0
		default:
			wait = -1
		}
	}
}

// stop ends run; every connection is gone by then (Shutdown).
func (p *poller) stop() {
	unix.Write(p.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	<-p.done
	unix.Close(p.wake)
	unix.Close(p.epfd)
}
