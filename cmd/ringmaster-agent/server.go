package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// server is a TLS server the sidecar feeds.
type server interface {
	// apply writes the server's files for keys (the keys served, in serving
	// order: active, staged, decrypt-only newest first) and has the server
	// take them, unless it holds them already.
	apply(ctx context.Context, keys []agent.TicketKey) (applied, error)
}

// applied is what the server holds after an apply.
type applied struct {
	// held are the ids of the keys the server holds, in its own order.
	held []string
	// took reports whether the server took new keys (a reload, a runtime
	// API update, a new file picked up).
	took bool
	// wake, if set, is when the server wants to be applied again: a key it
	// left waiting is due (nginx's --reload-window).
	wake time.Time
}

// The causes of a failed apply: the label of
// ringmaster_sidecar_reload_errors_total.
const (
	causeWrite      = "write"       // the shared directory could not be written
	causeCheck      = "check"       // the files written, or --check-command, failed the check before a reload
	causeNoServer   = "no_server"   // no nginx master behind the pid file; no HAProxy behind the socket
	causeSignal     = "signal"      // the reload signal could not be sent
	causeNotTaken   = "not_taken"   // the server did not take the keys in time
	causeProbe      = "probe"       // a new ticket was not under the active key, or no ticket came
	causeRuntimeAPI = "runtime_api" // HAProxy's runtime API refused or failed a command
)

var causes = []string{causeWrite, causeCheck, causeNoServer, causeSignal, causeNotTaken, causeProbe, causeRuntimeAPI}

// applyError is a failed apply and its cause.
type applyError struct {
	cause string
	err   error
}

func (e *applyError) Error() string { return e.err.Error() }
func (e *applyError) Unwrap() error { return e.err }

func fail(cause string, format string, args ...any) error {
	return &applyError{cause: cause, err: fmt.Errorf(format, args...)}
}

// causeOf is the cause of err, an apply's error.
func causeOf(err error) string {
	var ae *applyError
	if errors.As(err, &ae) {
		return ae.cause
	}
	return causeWrite
}

// derive is k's key in format f.
func derive(k agent.TicketKey, f keyring.Format) [keyring.FormatKeySize]byte {
	d, err := keyring.DeriveKey(k.Secret, f)
	if err != nil {
		panic(err) // unreachable: the sidecar's formats all derive
	}
	return d
}

// ids are the ids of keys, in order.
func ids(keys []agent.TicketKey) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.ID
	}
	return out
}

// confirm waits until the server issues new tickets under the key named
// want, polling it through p, or until ctx ends.
func confirm(ctx context.Context, p *prober, want []byte) error {
	var last error
	for {
		name, err := p.keyName(ctx)
		if err == nil && bytes.Equal(name, want) {
			return nil
		}
		if err == nil {
			err = errors.New("a new ticket is under another key than the active one")
		}
		last = err
		select {
		case <-ctx.Done():
			return fail(causeProbe, "%w (after %v)", last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
