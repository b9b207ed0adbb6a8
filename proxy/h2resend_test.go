package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// h2 frame types and flags the resetting upstream speaks.
const (
	h2Data, h2Headers, h2RSTStream, h2Settings = 0x0, 0x1, 0x3, 0x4
	h2EndStream, h2Ack                         = 0x1, 0x1
	h2ProtocolError                            = 0x1
)

// h2Frame writes one HTTP/2 frame.
func h2Frame(w io.Writer, typ, flags byte, stream uint32, payload []byte) error {
	var hdr [9]byte
	hdr[0], hdr[1], hdr[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	hdr[3], hdr[4] = typ, flags
	binary.BigEndian.PutUint32(hdr[5:], stream)
	_, err := w.Write(append(hdr[:], payload...))
	return err
}

// resettingH2Upstream is an https upstream that speaks just enough HTTP/2
// to read whole requests (HEADERS, then DATA to END_STREAM) and answer each
// with RST_STREAM PROTOCOL_ERROR: the reset net/http's HTTP/2 transport
// retries by rewinding the body. calls counts the requests it received.
func resettingH2Upstream(t *testing.T, calls *atomic.Int64) (addr string, roots *x509.CertPool) {
	t.Helper()
	// httptest's certificate, served from a raw listener.
	certSrv := httptest.NewUnstartedServer(nil)
	certSrv.StartTLS()
	cert, roots := certSrv.TLS.Certificates[0], x509.NewCertPool()
	roots.AddCert(certSrv.Certificate())
	certSrv.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
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
			go serveResettingH2(c, calls)
		}
	}()
	return ln.Addr().String(), roots
}

func serveResettingH2(c net.Conn, calls *atomic.Int64) {
	defer c.Close()
	preface := make([]byte, 24)
	if _, err := io.ReadFull(c, preface); err != nil || h2Frame(c, h2Settings, 0, 0, nil) != nil {
		return
	}
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags, stream := hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&0x7fffffff
		if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
			return
		}
		var err error
		switch {
		case typ == h2Settings && flags&h2Ack == 0:
			err = h2Frame(c, h2Settings, h2Ack, 0, nil)
		case typ == h2Headers:
			calls.Add(1)
		}
		if (typ == h2Headers || typ == h2Data) && flags&h2EndStream != 0 {
			err = h2Frame(c, h2RSTStream, 0, stream, binary.BigEndian.AppendUint32(nil, h2ProtocolError))
		}
		if err != nil {
			return
		}
	}
}

// A written request is never sent again by the transport layer
// (docs/gateway.md, upstream calls): over HTTP/2 an upstream that resets
// the stream with PROTOCOL_ERROR after reading the whole request gets
// exactly one call per model attempt, and the attempt fails as a reset.
func TestHTTP2ResetRequestIsNeverResent(t *testing.T) {
	var calls atomic.Int64
	addr, roots := resettingH2Upstream(t, &calls)
	gg := httpsGW(t, "https://"+addr, roots, "", "  requestBudget: {maxAttempts: 1}\n")
	r := gg.chat("p/m")
	if r.code != 502 || !strings.Contains(r.body, `"provider":"p"`) {
		t.Fatalf("after a PROTOCOL_ERROR reset: %d %s, want a typed 502", r.code, r.body)
	}
	if a := r.h.Get("X-Breakwater-Attempts"); a != "1" || calls.Load() != 1 {
		t.Fatalf("upstream calls %d for %s model attempts, want exactly one per attempt", calls.Load(), a)
	}
}

// The gateway's own calls outside an attempt (spend-wall resets, token
// counts, connection tests) go through g.client, which sends a written
// request once over HTTP/2 too (sendOnceTransport): a reset of the window
// is good once, and a resend could spend it.
func TestGatewayOwnCallsAreNeverResentOverHTTP2(t *testing.T) {
	var calls atomic.Int64
	addr, roots := resettingH2Upstream(t, &calls)
	gg := httpsGW(t, "https://"+addr, roots, "", "")
	gg.g.transport.TLSClientConfig = &tls.Config{RootCAs: roots}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+"/v1/reset", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gg.g.client.Do(req); err == nil {
		t.Fatal("a reset stream answered")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the upstream got %d whole requests for one call, want 1", n)
	}
}
