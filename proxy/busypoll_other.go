//go:build !linux

package proxy

import (
	"net"
	"time"
)

// pollReadable does nothing here: busy polling is implemented for Linux.
func pollReadable(net.Conn, time.Duration) bool { return false }

const pollSupported = false
