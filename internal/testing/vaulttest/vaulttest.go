// Package vaulttest runs a real Vault dev server on loopback for tests: the
// binary hack/vault.sh builds, found through $RINGMASTER_VAULT (make test sets
// it). It serves TLS with a CA of its own (vault server -dev-tls), as a key
// source must. It is test support, imported only by tests.
package vaulttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	vault "github.com/hashicorp/vault/api"
)

// RootToken is the dev server's root token.
const RootToken = "ringmaster-test-root"

// Server is one Vault dev server process. Its storage is in memory, so a
// restart forgets every mount, policy and token: Restart runs Setup again.
type Server struct {
	// Addr is https://127.0.0.1:PORT.
	Addr string
	// CA is the PEM of the CA the server's certificate chains to. A restart
	// makes a new one.
	CA []byte
	// Root is a client holding the root token.
	Root *vault.Client
	// Setup configures a fresh server; Start and Restart call it.
	Setup func(*vault.Client) error

	bin, dir, listen string
	cmd              *exec.Cmd
	exited           chan struct{}
}

// Binary returns the Vault binary tests use, or an error saying how to get it.
func Binary() (string, error) {
	bin := os.Getenv("RINGMASTER_VAULT")
	if bin == "" {
		return "", errors.New("RINGMASTER_VAULT is not set: run the tests through make test, which builds Vault (hack/vault.sh)")
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("RINGMASTER_VAULT: %w", err)
	}
	return bin, nil
}

// Start runs a dev server on a free loopback port, waits until it serves,
// and runs setup. dir holds its log.
func Start(dir string, setup func(*vault.Client) error) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	listen := l.Addr().String()
	l.Close()
	s := &Server{Addr: "https://" + listen, Setup: setup, bin: bin, dir: dir, listen: listen}
	return s, s.start()
}

func (s *Server) start() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "vault.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	certDir := filepath.Join(s.dir, "tls")
	if err := os.RemoveAll(certDir); err != nil {
		return err
	}
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	s.cmd = exec.Command(s.bin, "server", "-dev", "-dev-tls", "-dev-tls-cert-dir="+certDir, "-dev-root-token-id="+RootToken,
		"-dev-listen-address="+s.listen, "-dev-no-store-token")
	s.cmd.Env = append(os.Environ(), "HOME="+s.dir, "VAULT_ADDR=", "VAULT_TOKEN=")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start vault: %w", err)
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(s.cmd, s.exited)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.waitCA(ctx, filepath.Join(certDir, "vault-ca.pem")); err != nil {
		return err
	}
	cfg := vault.DefaultConfig()
	cfg.Address = s.Addr
	if err := cfg.ConfigureTLS(&vault.TLSConfig{CACertBytes: s.CA}); err != nil {
		return err
	}
	if s.Root, err = vault.NewClient(cfg); err != nil {
		return err
	}
	s.Root.SetToken(RootToken)
	for {
		h, err := s.Root.Sys().HealthWithContext(ctx)
		if err == nil && h.Initialized && !h.Sealed {
			break
		}
		select {
		case <-s.exited:
			return fmt.Errorf("vault exited at start; see %s", filepath.Join(s.dir, "vault.log"))
		case <-ctx.Done():
			return fmt.Errorf("vault did not become ready: %w", errors.Join(ctx.Err(), err))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if s.Setup != nil {
		if err := s.Setup(s.Root); err != nil {
			return fmt.Errorf("set up vault: %w", err)
		}
	}
	return nil
}

// waitCA waits for the server to write its CA, and reads it.
func (s *Server) waitCA(ctx context.Context, path string) error {
	for {
		ca, err := os.ReadFile(path)
		if err == nil && bytes.Contains(ca, []byte("-----END CERTIFICATE-----")) {
			s.CA = ca
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("vault exited at start; see %s", filepath.Join(s.dir, "vault.log"))
		case <-ctx.Done():
			return fmt.Errorf("vault wrote no CA at %s: %w", path, errors.Join(ctx.Err(), err))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop ends the server by its process id and waits for it to exit.
func (s *Server) Stop() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
	return nil
}

// Restart starts a fresh server on the same address and sets it up again.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.start()
}
