//go:build !linux

package proxy

import (
	"net"
	"time"
)

type pollSock struct{}

// pollReadable does nothing here: busy polling is implemented for Linux.
func pollReadable(net.Conn, time.Duration, *pollSock) bool { return false }

const pollSupported = false
