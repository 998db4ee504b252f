package agent_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// An HTTPS server whose certificate and session ticket keys follow a
// projected volume, without restarts.
func Example() {
	a, err := agent.New(agent.Options{
		Dir:     "/var/run/ringmaster",
		Require: agent.TicketKeys | agent.Certificate,
	})
	if errors.Is(err, agent.ErrTicketKeys) {
		log.Fatalf("no usable ticket key ring yet: %v", err)
	}
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := a.Start(ctx); err != nil {
			log.Print(err)
		}
	}()
	prometheus.MustRegister(a)

	srv := &http.Server{
		Addr: ":8443",
		// NextProtos in the base: the per-handshake config negotiates ALPN.
		TLSConfig: a.TLSConfig(&tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}),
	}
	log.Fatal(srv.ListenAndServeTLS("", ""))
}
