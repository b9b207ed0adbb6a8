package proxy

import (
	"net"
	"syscall"
	"time"
	"unsafe"
)

// pollReadable peeks at c until a byte (or end of stream, or an error) is
// there to read, or d has passed. The blocking read that follows returns
// at once when something arrived. A connection that is not a plain socket
// is not polled. It reports whether the wait ended before d.
func pollReadable(c net.Conn, d time.Duration) (ready bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		start := time.Now()
		for {
			// recv(fd, b, 1, MSG_PEEK|MSG_DONTWAIT): the address-less
			// form, which syscall.Recvfrom would allocate for.
			_, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
				syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
			if errno != syscall.EAGAIN {
				ready = true
				return true
			}
			if time.Since(start) >= d {
				return true
			}
			// Give the CPU to whatever else wants it (the upstream we
			// wait for may share it); with nothing else runnable this
			// returns at once.
			syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		}
	})
	return ready
}

const pollSupported = true
