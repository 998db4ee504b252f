package cilium

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// standIn is a TLS server that keys its session tickets as Envoy does with
// session_ticket_keys: each key is 80 bytes, a 16-byte name first, which a
// ticket carries in clear; a new ticket is sealed under the first key; a
// ticket is opened by the key of its name, whichever it is in the list;
// a ticket of an unknown name costs a full handshake. (No Envoy can be
// built here; Go's crypto/tls lets a server seal its own tickets.) The
// rest of the 80 bytes are a 32-byte HMAC-SHA256 key and a 32-byte
// AES-256 key, as in RFC 5077's recommended ticket: name, IV, the
// AES-CBC-encrypted session, the HMAC of all three.
type standIn struct {
	ln    net.Listener
	roots *x509.CertPool
	mu    sync.Mutex
	keys  []*corev3.DataSource
}

func newStandIn(t *testing.T) *standIn {
	t.Helper()
	cert, roots := selfSigned(t)
	s := &standIn{roots: roots}
	cfg := &tls.Config{
		Certificates:  []tls.Certificate{cert},
		WrapSession:   s.wrap,
		UnwrapSession: s.unwrap,
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = c.Write([]byte("ok\n")) // drives the handshake, then the TLS 1.3 tickets
			}()
		}
	}()
	return s
}

func (s *standIn) setKeys(keys []*corev3.DataSource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = keys
}

func (s *standIn) key(name []byte) (k []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ds := range s.keys {
		k := ds.GetInlineBytes()
		if len(k) != 80 {
			continue
		}
		if (name == nil && i == 0) || (name != nil && bytes.Equal(k[:16], name)) {
			return k, true
		}
	}
	return nil, false
}

func (s *standIn) wrap(_ tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
	k, ok := s.key(nil)
	if !ok {
		return nil, io.ErrUnexpectedEOF // no key: no ticket
	}
	plain, err := ss.Bytes()
	if err != nil {
		return nil, err
	}
	pad := aes.BlockSize - len(plain)%aes.BlockSize
	plain = append(plain, bytes.Repeat([]byte{byte(pad)}, pad)...)
	ticket := make([]byte, 16+aes.BlockSize+len(plain), 16+aes.BlockSize+len(plain)+sha256.Size)
	copy(ticket, k[:16])
	iv := ticket[16 : 16+aes.BlockSize]
	if _, err := rand.Read(iv); err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k[48:80])
	if err != nil {
		return nil, err
	}
	cipher.NewCBCEncrypter(block, iv).CryptBlocks(ticket[16+aes.BlockSize:], plain)
	mac := hmac.New(sha256.New, k[16:48])
	mac.Write(ticket)
	return mac.Sum(ticket), nil
}

func (s *standIn) unwrap(ticket []byte, _ tls.ConnectionState) (*tls.SessionState, error) {
	if len(ticket) < 16+2*aes.BlockSize+sha256.Size || (len(ticket)-16-sha256.Size)%aes.BlockSize != 0 {
		return nil, nil
	}
	k, ok := s.key(ticket[:16])
	if !ok {
		return nil, nil // unknown key name: a full handshake
	}
	body, tag := ticket[:len(ticket)-sha256.Size], ticket[len(ticket)-sha256.Size:]
	mac := hmac.New(sha256.New, k[16:48])
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), tag) {
		return nil, nil
	}
	block, err := aes.NewCipher(k[48:80])
	if err != nil {
		return nil, err
	}
	plain := make([]byte, len(body)-16-aes.BlockSize)
	cipher.NewCBCDecrypter(block, body[16:16+aes.BlockSize]).CryptBlocks(plain, body[16+aes.BlockSize:])
	pad := int(plain[len(plain)-1])
	if pad == 0 || pad > aes.BlockSize || pad > len(plain) {
		return nil, nil
	}
	return tls.ParseSessionState(plain[:len(plain)-pad])
}

// lastTicket is a client's session cache that keeps the newest session.
type lastTicket struct {
	mu sync.Mutex
	cs *tls.ClientSessionState
}

func (c *lastTicket) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs, c.cs != nil
}

func (c *lastTicket) Put(_ string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs != nil {
		c.cs = cs
	}
}

// connect makes one TLS connection with cache, reads the greeting and
// reports whether it resumed.
func (s *standIn) connect(t *testing.T, version uint16, cache tls.ClientSessionCache) bool {
	t.Helper()
	c, err := tls.Dial("tcp", s.ln.Addr().String(), &tls.Config{ServerName: "edge.example", RootCAs: s.roots,
		MinVersion: version, MaxVersion: version, ClientSessionCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.ReadAll(c); err != nil {
		t.Fatal(err)
	}
	return c.ConnectionState().DidResume
}

// ticket is a new session's ticket from the stand-in, under version.
func (s *standIn) ticket(t *testing.T, version uint16) *tls.ClientSessionState {
	t.Helper()
	cache := &lastTicket{}
	s.connect(t, version, cache)
	cs, ok := cache.Get("")
	if !ok {
		t.Fatal("the stand-in issued no ticket")
	}
	return cs
}

// resumes reports whether the session of ticket resumes on the stand-in.
func (s *standIn) resumes(t *testing.T, version uint16, ticket *tls.ClientSessionState) bool {
	t.Helper()
	return s.connect(t, version, &lastTicket{cs: ticket})
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "edge.example"},
		DNSNames: []string{"edge.example"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots
}
