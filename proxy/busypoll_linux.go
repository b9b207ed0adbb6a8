package proxy

import (
	"net"
	"syscall"
	"time"
	"unsafe"
)

// pollSock is what polling a connection needs, made on its first poll and
// kept with its window: the raw connection and the callback handed to it
// (a fresh closure and RawConn per poll were three allocations).
type pollSock struct {
	rc    syscall.RawConn
	fn    func(fd uintptr) bool
	none  bool // not a plain socket: never polled
	d     time.Duration
	ready bool
	b     [1]byte
}

// pollReadable peeks at c until a byte (or end of stream, or an error) is
// there to read, or d has passed. The blocking read that follows returns
// at once when something arrived. A connection that is not a plain socket
// is not polled. It reports whether the wait ended before d. s is c's own.
func pollReadable(c net.Conn, d time.Duration, s *pollSock) bool {
	if s.rc == nil {
		if s.none {
			return false
		}
		sc, ok := c.(syscall.Conn)
		if !ok {
			s.none = true
			return false
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			s.none = true
			return false
		}
		s.rc, s.fn = rc, s.peek
	}
	s.d, s.ready = d, false
	_ = s.rc.Read(s.fn)
	return s.ready
}

func (s *pollSock) peek(fd uintptr) bool {
	start := time.Now()
	for {
		// recv(fd, b, 1, MSG_PEEK|MSG_DONTWAIT): the address-less form,
		// which syscall.Recvfrom would allocate for.
		_, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if errno != syscall.EAGAIN {
			s.ready = true
			return true
		}
		if time.Since(start) >= s.d {
			return true
		}
		// Give the CPU to whatever else wants it (the upstream we wait
		// for may share it); with nothing else runnable this returns at
		// once.
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

const pollSupported = true
