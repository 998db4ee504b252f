package echring_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

func seed(b byte) []byte { return bytes.Repeat([]byte{b}, echring.SeedSize) }

var params = echring.Params{PublicName: "public.example.test", MaxNameLength: 32}

func TestNewConfigIsDeterministicPerSeed(t *testing.T) {
	a, err := echring.NewConfig(7, seed(1), params)
	if err != nil {
		t.Fatal(err)
	}
	again, err := echring.NewConfig(7, seed(1), params)
	if err != nil {
		t.Fatal(err)
	}
	other, err := echring.NewConfig(7, seed(2), params)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Config, again.Config) || !bytes.Equal(a.PrivateKey, again.PrivateKey) {
		t.Error("one seed gave two configs")
	}
	if bytes.Equal(a.PrivateKey, other.PrivateKey) || bytes.Equal(a.Config, other.Config) {
		t.Error("two seeds gave one key")
	}
	if a.ID != 7 || a.State != echring.Staged || len(a.PrivateKey) != 32 {
		t.Errorf("config %+v, private key %d bytes: want id 7, staged, 32 bytes", a, len(a.PrivateKey))
	}
}

// TestNewConfigWire checks the RFC 9849 §4 encoding byte by byte for the
// defaults: version, length, id, KEM, key, the three suites, the name.
func TestNewConfigWire(t *testing.T) {
	c, err := echring.NewConfig(0x2a, seed(3), params)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Config
	want := []byte{0xfe, 0x0d}
	if !bytes.HasPrefix(b, want) {
		t.Fatalf("version % x", b[:2])
	}
	if n := int(b[2])<<8 | int(b[3]); n != len(b)-4 {
		t.Errorf("length %d, config has %d bytes after it", n, len(b)-4)
	}
	if b[4] != 0x2a || b[5] != 0x00 || b[6] != 0x20 || b[7] != 0 || b[8] != 32 {
		t.Errorf("id, kem, key length: % x", b[4:9])
	}
	rest := b[9+32:]
	suites := []byte{0, 12, 0, 1, 0, 1, 0, 1, 0, 2, 0, 1, 0, 3}
	if !bytes.HasPrefix(rest, suites) {
		t.Errorf("suites % x, want % x", rest[:len(suites)], suites)
	}
	rest = rest[len(suites):]
	name := append([]byte{32, byte(len(params.PublicName))}, params.PublicName...)
	name = append(name, 0, 0)
	if !bytes.Equal(rest, name) {
		t.Errorf("tail % x, want % x", rest, name)
	}
	list := echring.ConfigList([]echring.Config{c, c})
	if n := int(list[0])<<8 | int(list[1]); n != 2*len(c.Config) || !bytes.Equal(list[2:], append(bytes.Clone(c.Config), c.Config...)) {
		t.Errorf("ConfigList length %d, want %d and the configs in order", n, 2*len(c.Config))
	}
}

func TestNewConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		seed []byte
		p    echring.Params
		want string
	}{
		{"short seed", seed(1)[:31], params, "seed is 31 bytes, want 32"},
		{"zero seed", make([]byte, 32), params, "seed is all zero"},
		{"no public name", seed(1), echring.Params{}, "public name is not a DNS name"},
		{"single label", seed(1), echring.Params{PublicName: "localhost"}, "public name is not a DNS name"},
		{"underscore", seed(1), echring.Params{PublicName: "a_b.test"}, "public name is not a DNS name"},
		{"trailing dot", seed(1), echring.Params{PublicName: "a.test."}, "public name is not a DNS name"},
		{"long name", seed(1), echring.Params{PublicName: strings.Repeat("a.", 127) + "b"}, "public name is not a DNS name"},
		{"ML-KEM", seed(1), echring.Params{PublicName: "a.test", KEM: 0x0041}, "KEM 0x0041 is not one Go's crypto/tls accepts"},
		{"X-Wing", seed(1), echring.Params{PublicName: "a.test", KEM: 0x647a}, "KEM 0x647a is not one"},
		{"export-only AEAD", seed(1), echring.Params{PublicName: "a.test", Suites: []echring.Suite{{1, 0xffff}}}, "cipher suite 0 (KDF 0x0001, AEAD 0xffff) is not one"},
		{"SHAKE KDF", seed(1), echring.Params{PublicName: "a.test", Suites: []echring.Suite{{1, 1}, {0x10, 1}}}, "cipher suite 1 (KDF 0x0010, AEAD 0x0001)"},
		{"repeated suite", seed(1), echring.Params{PublicName: "a.test", Suites: []echring.Suite{{1, 1}, {1, 1}}}, "cipher suite 1 repeats suite 0"},
		{"too many suites", seed(1), echring.Params{PublicName: "a.test", Suites: make([]echring.Suite, 10)}, "10 cipher suites, more than 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := echring.NewConfig(1, tc.seed, tc.p)
			if !errors.Is(err, echring.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewConfig = %v, want an ErrInvalidConfig with %q", err, tc.want)
			}
		})
	}
}

// TestHandshake serves each KEM and several suites through crypto/tls on
// loopback: a client given ConfigList of a config gets ECHAccepted, with
// the server's keys from the config, and is refused with retry configs when
// the server holds another config.
func TestHandshake(t *testing.T) {
	ca, err := testpki.NewCA("ech test")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(testpki.Leaf{DNSNames: []string{"inner.example.test", params.PublicName}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    echring.Params
	}{
		{"X25519 defaults", params},
		{"P-256 AES-256", echring.Params{PublicName: params.PublicName, KEM: echring.KEMP256HKDFSHA256, Suites: []echring.Suite{{echring.KDFHKDFSHA256, echring.AEADAES256GCM}}}},
		{"P-384 SHA-384", echring.Params{PublicName: params.PublicName, KEM: echring.KEMP384HKDFSHA384, Suites: []echring.Suite{{echring.KDFHKDFSHA384, echring.AEADAES128GCM}}}},
		{"P-521 SHA-512 ChaCha", echring.Params{PublicName: params.PublicName, KEM: echring.KEMP521HKDFSHA512, Suites: []echring.Suite{{echring.KDFHKDFSHA512, echring.AEADChaCha20Poly1305}}, MaxNameLength: 255}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := echring.NewConfig(9, seed(4), tc.p)
			if err != nil {
				t.Fatal(err)
			}
			other, err := echring.NewConfig(10, seed(5), tc.p)
			if err != nil {
				t.Fatal(err)
			}
			// The codec reads back what NewConfig made.
			r := echring.Ring{Ring: "shop/web", Epoch: 1, IssuedAt: time.Now(), Configs: []echring.Config{other, c}}
			for i := range r.Configs {
				r.Configs[i].CreatedAt, r.Configs[i].ExpiresAt = r.IssuedAt, r.IssuedAt.Add(time.Hour)
			}
			data, err := echring.Encode(r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := echring.Decode(data); err != nil {
				t.Fatal(err)
			}
			serve := func(keys ...echring.Config) string {
				var ek []tls.EncryptedClientHelloKey
				for _, k := range keys {
					ek = append(ek, tls.EncryptedClientHelloKey{Config: k.Config, PrivateKey: k.PrivateKey, SendAsRetry: true})
				}
				return listen(t, &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, MinVersion: tls.VersionTLS13, EncryptedClientHelloKeys: ek})
			}
			client := &tls.Config{ServerName: "inner.example.test", RootCAs: ca.Pool(), MinVersion: tls.VersionTLS13, EncryptedClientHelloConfigList: echring.ConfigList([]echring.Config{c})}
			cs, err := dial(serve(other, c), client)
			if err != nil {
				t.Fatal(err)
			}
			if !cs.ECHAccepted || cs.ServerName != "inner.example.test" {
				t.Errorf("ECHAccepted %t with server name %q, want accepted for the inner name", cs.ECHAccepted, cs.ServerName)
			}
			_, err = dial(serve(other), client)
			var rej *tls.ECHRejectionError
			if !errors.As(err, &rej) {
				t.Fatalf("dial a server without the config: %v, want an ECH rejection", err)
			}
			if want := echring.ConfigList([]echring.Config{other}); !bytes.Equal(rej.RetryConfigList, want) {
				t.Errorf("retry configs are not the server's config list")
			}
		})
	}
}

// listen serves one TLS handshake at a time on loopback until the test ends.
func listen(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			_ = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
	}()
	return ln.Addr().String()
}

func dial(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState(), nil
}
