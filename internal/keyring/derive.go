package keyring

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"time"
)

// Format is a server's ticket key format, derived from the ring.
type Format string

// The formats a ring can be exported in.
const (
	// FormatGo is ticketkeys.json itself, read by pkg/agent.
	FormatGo Format = "go"
	// FormatNginx is one 80-byte file per key for ssl_session_ticket_key; the
	// first file encrypts.
	FormatNginx Format = "nginx"
	// FormatHAProxy is a tls-ticket-keys file: base64 80-byte keys, one a
	// line, exactly the 3 HAProxy keeps (see HAProxyKeys); HAProxy encrypts
	// with the next-to-last line.
	FormatHAProxy Format = "haproxy"
	// FormatEnvoy is one 80-byte file per key for Envoy's
	// session_ticket_keys; the first key encrypts.
	FormatEnvoy Format = "envoy"
	// FormatCilium is Cilium's Secret layout for Envoy's session ticket
	// keys: tls.sessionticket.key, the key Envoy encrypts with, and
	// tls.sessionticket.key.1 to .9, which only decrypt (see CiliumKeys).
	FormatCilium Format = "cilium"
)

// FormatKeySize is the size of a derived nginx, HAProxy, Envoy or Cilium key: a
// 16-byte name, a 32-byte HMAC key and a 32-byte AES-256 key. Every byte is
// HKDF output, so the layout within the 80 bytes does not matter here.
const FormatKeySize = 80

// DeriveKey derives the 80-byte key that format f uses for secret s, with
// HKDF-SHA256 under a label per format. Each format gets keys unrelated to
// the others' and to the Go key, so a leak of one server's key file exposes
// no other server's tickets. Cilium's keys feed Envoy too, but they are
// stored where Envoy's sidecar files are not (a Secret in the namespace the
// Cilium agent reads), so they get a label of their own as well.
func DeriveKey(s Secret, f Format) ([FormatKeySize]byte, error) {
	var out [FormatKeySize]byte
	switch f {
	case FormatNginx, FormatHAProxy, FormatEnvoy, FormatCilium:
	default:
		return out, fmt.Errorf("no derived key for format %q", f)
	}
	k, err := hkdf.Key(sha256.New, s[:], nil, "ringmaster.io/v1 ticket-key "+string(f), FormatKeySize)
	if err != nil {
		return out, err
	}
	copy(out[:], k)
	return out, nil
}

// Files returns the files format f adds beside ticketkeys.json, keyed by file
// name, with the keys ordered as that server expects at instant at (the
// epoch's IssuedAt when building a snapshot). The Go format adds none.
//
//   - nginx:   nginx.0.key, nginx.1.key, …, active first.
//   - Envoy:   envoy.0.key, envoy.1.key, …, active first.
//   - HAProxy: haproxy.keys, always the 3 lines HAProxy keeps, in the order
//     of HAProxyKeys: the newest decrypt-only key, the active key (the
//     next-to-last line, which HAProxy encrypts with), the staged key. A
//     ring of two keys repeats the active key on the first line. No file
//     when every key has expired.
//   - Cilium:  tls.sessionticket.key, the active key, and
//     tls.sessionticket.key.1 to .9 for the rest, in the order of
//     CiliumKeys. No file when every key has expired.
func (r Ring) Files(f Format, at time.Time) (map[string][]byte, error) {
	files := map[string][]byte{}
	switch f {
	case FormatGo:
		return files, nil
	case FormatNginx, FormatEnvoy:
		for i, k := range r.TicketKeys(at) {
			d, err := DeriveKey(k.Secret, f)
			if err != nil {
				return nil, err
			}
			files[fmt.Sprintf("%s.%d.key", f, i)] = d[:]
		}
		return files, nil
	case FormatHAProxy:
		keys, ok := HAProxyKeys(r.TicketKeys(at))
		if !ok {
			// Every key has expired: HAProxy would refuse the file anyway.
			return files, nil
		}
		var b strings.Builder
		for _, k := range keys {
			d, err := DeriveKey(k.Secret, f)
			if err != nil {
				return nil, err
			}
			b.WriteString(base64.StdEncoding.EncodeToString(d[:]))
			b.WriteByte('\n')
			clear(d[:])
		}
		files["haproxy.keys"] = []byte(b.String())
		return files, nil
	case FormatCilium:
		for i, k := range CiliumKeys(r.TicketKeys(at)) {
			d, err := DeriveKey(k.Secret, f)
			if err != nil {
				return nil, err
			}
			files[CiliumFileName(i)] = d[:]
		}
		return files, nil
	}
	return nil, fmt.Errorf("unknown key format %q", f)
}
