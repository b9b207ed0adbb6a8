// Command bareproxy is the floor `make bench-proxy` measures the gateway
// against: a reverse proxy with no logic at all, on the same stack as the
// gateway's edge — net/http's Server for clients, net/http's Transport
// (keep-alive, MaxIdleConnsPerHost 1024) for the one upstream — with the
// request body read whole and the response copied through and flushed.
// Whatever a gateway adds on top of this is its own cost; what this adds
// over the direct mock is the cost of a Go HTTP hop on the machine.
//
// usage: bareproxy LISTEN UPSTREAM_HOST:PORT
package main

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: bareproxy LISTEN UPSTREAM_HOST:PORT")
	}
	upstream := "http://" + os.Args[2]
	tr := &http.Transport{
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := tr.RoundTrip(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		f := w.(http.Flusher)
		buf := make([]byte, 4096)
		for {
			n, err := res.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				f.Flush()
			}
			if err != nil {
				return
			}
		}
	})
	srv := &http.Server{Addr: os.Args[1], Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
