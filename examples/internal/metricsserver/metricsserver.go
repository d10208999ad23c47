// Package metricsserver serves a Prometheus registry for the examples' -metrics-addr flag.
package metricsserver

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve serves g at /metrics on addr, which must be a loopback address (port 0 picks one),
// until stop is called. It returns the URL to scrape.
func Serve(addr string, g prometheus.Gatherer) (url string, stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", nil, fmt.Errorf("-metrics-addr %s: not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/metrics", func() { srv.Close(); <-served }, nil
}
