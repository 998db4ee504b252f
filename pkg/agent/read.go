package agent

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

const (
	// dataDir is the kubelet's symlink to the current timestamped directory.
	dataDir  = "..data"
	certFile = "tls.crt"
	keyFile  = "tls.key"

	// readAttempts bounds the retries when ..data moves during a read. The
	// kubelet swaps at most once per sync, so a second attempt nearly always
	// succeeds; more failures mean something else is churning the directory.
	readAttempts = 4
	// maxFileSize keeps a corrupt or hostile file from exhausting memory; a
	// ring of 18 keys is about 4 KiB, a certificate chain a few KiB.
	maxFileSize = 1 << 20
)

// reason classifies a failed read; it is the label of
// ringmaster_agent_reload_errors_total.
type reason int

const (
	reasonDirectory reason = iota
	reasonInconsistent
	reasonRingMissing
	reasonRingInvalid
	reasonRingExpired
	reasonCertMissing
	reasonCertInvalid
	reasonCertExpired
	numReasons
)

var reasonNames = [numReasons]string{
	reasonDirectory:    "directory",
	reasonInconsistent: "inconsistent_read",
	reasonRingMissing:  "ring_missing",
	reasonRingInvalid:  "ring_invalid",
	reasonRingExpired:  "ring_expired",
	reasonCertMissing:  "certificate_missing",
	reasonCertInvalid:  "certificate_invalid",
	reasonCertExpired:  "certificate_expired",
}

func (r reason) String() string { return reasonNames[r] }

func (r reason) sentinel() error {
	switch r {
	case reasonRingMissing, reasonRingInvalid, reasonRingExpired:
		return ErrTicketKeys
	case reasonCertMissing, reasonCertInvalid, reasonCertExpired:
		return ErrCertificate
	default:
		return ErrDirectory
	}
}

type loadError struct {
	reason reason
	err    error
}

// material is the good part of one read: ring and cert are nil when not
// required or not usable.
type material struct {
	ring *keyring.Ring
	cert *certificate
}

type certificate struct {
	tls      tls.Certificate
	notAfter time.Time
	// sum identifies the pair for change detection.
	sum [sha256.Size]byte
}

// read reads the required files as one consistent set and validates them at
// now.
//
// Consistency: in a kubelet volume every file of one generation lives in one
// timestamped directory that is never modified, and ..data is renamed to
// point at the next one. So read resolves ..data once and reads every file
// inside the directory it names, never through the per-file symlinks (each
// of which resolves ..data anew and could mix generations, for instance a
// new tls.crt with an old tls.key). If ..data moved meanwhile (the old
// directory may even be deleted under the read), the read starts over.
func (a *Agent) read(now time.Time) (material, []*loadError) {
	names := a.fileNames()
	var files map[string][]byte
	var missing map[string]error
	for attempt := 0; ; attempt++ {
		root, gen, err := a.resolve()
		if err != nil {
			return material{}, []*loadError{{reasonDirectory, err}}
		}
		if a.readHook != nil {
			a.readHook(attempt)
		}
		files, missing = readFiles(root, names)
		_, again, err := a.resolve()
		if err == nil && again == gen {
			break
		}
		if attempt+1 == readAttempts {
			return material{}, []*loadError{{reasonInconsistent,
				fmt.Errorf("%s changed during %d consecutive reads", dataDir, readAttempts)}}
		}
	}

	var m material
	var errs []*loadError
	if a.require&TicketKeys != 0 {
		r, e := parseRing(files, missing, now)
		if e != nil {
			errs = append(errs, e)
		} else {
			m.ring = r
		}
	}
	if a.require&Certificate != 0 {
		c, e := parseCert(files, missing, now)
		if e != nil {
			errs = append(errs, e)
		} else {
			m.cert = c
		}
	}
	return m, errs
}

func (a *Agent) fileNames() []string {
	var names []string
	if a.require&TicketKeys != 0 {
		names = append(names, keyring.FileName)
	}
	if a.require&Certificate != 0 {
		names = append(names, certFile, keyFile)
	}
	return names
}

// resolve returns the directory holding the files and its generation: the
// target of ..data, or "" for a plain directory without one.
func (a *Agent) resolve() (root, gen string, err error) {
	fi, err := os.Stat(a.dir)
	if err != nil {
		return "", "", err
	}
	if !fi.IsDir() {
		return "", "", fmt.Errorf("%s is not a directory", a.dir)
	}
	target, err := os.Readlink(filepath.Join(a.dir, dataDir))
	if errors.Is(err, fs.ErrNotExist) {
		return a.dir, "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("resolve %s: %w", dataDir, err)
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(a.dir, target)
	}
	return target, target, nil
}

// readFiles reads names from root; a file that cannot be read is reported in
// missing, with its error, rather than failing the whole read, because the
// caller first checks whether the read raced a swap.
func readFiles(root string, names []string) (files map[string][]byte, missing map[string]error) {
	files = make(map[string][]byte, len(names))
	missing = make(map[string]error)
	for _, n := range names {
		b, err := readFile(filepath.Join(root, n))
		if err != nil {
			missing[n] = err
			continue
		}
		files[n] = b
	}
	return files, missing
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", filepath.Base(name), maxFileSize)
	}
	return b, nil
}

func missingReason(err error, ifMissing, otherwise reason) reason {
	if errors.Is(err, fs.ErrNotExist) {
		return ifMissing
	}
	return otherwise
}

func parseRing(files map[string][]byte, missing map[string]error, now time.Time) (*keyring.Ring, *loadError) {
	if err := missing[keyring.FileName]; err != nil {
		return nil, &loadError{missingReason(err, reasonRingMissing, reasonRingInvalid), fmt.Errorf("read %s: %w", keyring.FileName, err)}
	}
	r, err := keyring.Decode(files[keyring.FileName])
	if err != nil {
		// keyring's errors name key ids, never key bytes.
		return nil, &loadError{reasonRingInvalid, fmt.Errorf("%s: %w", keyring.FileName, err)}
	}
	if len(r.TicketKeys(now)) == 0 {
		return nil, &loadError{reasonRingExpired, fmt.Errorf("%s: ring %s epoch %d: every key has expired", keyring.FileName, r.Name, r.Epoch)}
	}
	return &r, nil
}

func parseCert(files map[string][]byte, missing map[string]error, now time.Time) (*certificate, *loadError) {
	for _, n := range []string{certFile, keyFile} {
		if err := missing[n]; err != nil {
			return nil, &loadError{missingReason(err, reasonCertMissing, reasonCertInvalid), fmt.Errorf("read %s: %w", n, err)}
		}
	}
	crt, key := files[certFile], files[keyFile]
	// X509KeyPair checks that the key matches the leaf. Its errors describe
	// the problem without quoting the key.
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, &loadError{reasonCertInvalid, fmt.Errorf("%s/%s: %w", certFile, keyFile, err)}
	}
	leaf := pair.Leaf
	if leaf == nil { // only with GODEBUG x509keypairleaf=0
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, &loadError{reasonCertInvalid, fmt.Errorf("%s: %w", certFile, err)}
		}
		pair.Leaf = leaf
	}
	if !now.Before(leaf.NotAfter) {
		return nil, &loadError{reasonCertExpired, fmt.Errorf("%s: certificate serial %s expired at %s",
			certFile, leaf.SerialNumber, leaf.NotAfter.UTC().Format(time.RFC3339))}
	}
	h := sha256.New()
	h.Write(crt)
	h.Write([]byte{0})
	h.Write(key)
	c := &certificate{tls: pair, notAfter: leaf.NotAfter}
	h.Sum(c.sum[:0])
	return c, nil
}
