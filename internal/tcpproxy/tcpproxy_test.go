package tcpproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo serves one line back per connection.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				c.Write([]byte(line))
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestProxyForwardsAndGoesDown(t *testing.T) {
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got, err := roundTrip(p.Addr()); err != nil || got != "ping\n" {
		t.Fatalf("up: %q %v", got, err)
	}
	p.SetDown(true)
	if !p.Down() {
		t.Fatal("Down must report the outage")
	}
	if got, err := roundTrip(p.Addr()); err == nil && got == "ping\n" {
		t.Fatal("a down proxy must not forward")
	}
	p.SetDown(false)
	if got, err := roundTrip(p.Addr()); err != nil || got != "ping\n" {
		t.Fatalf("back up: %q %v", got, err)
	}
}
