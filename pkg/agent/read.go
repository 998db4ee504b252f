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
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ringmaster-io/ringmaster/internal/echring"
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
	reasonRingTooLarge
	reasonRingForeign
	reasonRingRollback
	reasonRingEpochConflict
	reasonRingExpired
	reasonCertMissing
	reasonCertInvalid
	reasonCertNotYetValid
	reasonCertExpired
	reasonECHMissing
	reasonECHInvalid
	reasonECHForeign
	reasonECHRollback
	reasonECHEpochConflict
	reasonECHExpired
	numReasons
)

var reasonNames = [numReasons]string{
	reasonDirectory:         "directory",
	reasonInconsistent:      "inconsistent_read",
	reasonRingMissing:       "ring_missing",
	reasonRingInvalid:       "ring_invalid",
	reasonRingTooLarge:      "ring_too_large",
	reasonRingForeign:       "ring_foreign",
	reasonRingRollback:      "ring_rollback",
	reasonRingEpochConflict: "ring_epoch_conflict",
	reasonRingExpired:       "ring_expired",
	reasonCertMissing:       "certificate_missing",
	reasonCertInvalid:       "certificate_invalid",
	reasonCertNotYetValid:   "certificate_not_yet_valid",
	reasonCertExpired:       "certificate_expired",
	reasonECHMissing:        "ech_missing",
	reasonECHInvalid:        "ech_invalid",
	reasonECHForeign:        "ech_foreign",
	reasonECHRollback:       "ech_rollback",
	reasonECHEpochConflict:  "ech_epoch_conflict",
	reasonECHExpired:        "ech_expired",
}

func (r reason) String() string { return reasonNames[r] }

func (r reason) sentinel() error {
	switch r {
	case reasonRingMissing, reasonRingInvalid, reasonRingTooLarge, reasonRingForeign,
		reasonRingRollback, reasonRingEpochConflict, reasonRingExpired:
		return ErrTicketKeys
	case reasonCertMissing, reasonCertInvalid, reasonCertNotYetValid, reasonCertExpired:
		return ErrCertificate
	case reasonECHMissing, reasonECHInvalid, reasonECHForeign, reasonECHRollback, reasonECHEpochConflict, reasonECHExpired:
		return ErrECHKeys
	default:
		return ErrDirectory
	}
}

type loadError struct {
	reason reason
	err    error
}

// loaded is what one read of the directory found, before the checks that
// depend on the time or on what was served before: ring and cert are nil
// when not required or not usable, and errs says why. ech is the ECH ring,
// read whenever echkeys.json is present; noECH says that it is absent.
type loaded struct {
	ring  *keyring.Ring
	cert  *certificate
	ech   *echring.Ring
	noECH bool
	errs  []*loadError
}

// wipe overwrites the key bytes of what l holds, when nobody takes it.
// (A certificate's private key is crypto/tls's, and left to the garbage
// collector.)
func (l loaded) wipe() {
	wipe(l.ring)
	wipeECH(l.ech)
}

// readJob is one read Start runs on a goroutine of its own. It is in the
// file system (open, stat, read: system calls that a hung network or FUSE
// file system may never return from), then parsing (CPU alone, bounded by
// maxFileSize a file), unless Start returned while it was in the file
// system, which abandons it.
type readJob struct {
	phase atomic.Int32
	// done is closed when the job's goroutine ends.
	done chan struct{}
}

const (
	phaseFileSystem int32 = iota
	phaseParse
	phaseAbandoned
)

func newReadJob() *readJob { return &readJob{done: make(chan struct{})} }

// toParse moves j from the file system to parsing, and reports false if
// Start abandoned it first. A nil j, New's read, always parses.
func (j *readJob) toParse() bool {
	return j == nil || j.phase.CompareAndSwap(phaseFileSystem, phaseParse)
}

// abandon is Start's return: it leaves j to end by itself if j is still in
// the file system (true), and so never parses; false means j is parsing,
// and Start waits for it.
func (j *readJob) abandon() bool {
	return j.phase.CompareAndSwap(phaseFileSystem, phaseAbandoned)
}

type certificate struct {
	tls                 tls.Certificate
	notBefore, notAfter time.Time
	// sum identifies the pair for change detection.
	sum [sha256.Size]byte
}

// load reads the required files as one consistent set and parses them. It
// touches no state of the agent's, so Start runs it on a goroutine of its
// own: whatever the file system does, the agent's loop goes on. With w, it
// first re-arms the watch on the directory if the directory was replaced.
//
// Consistency: in a kubelet volume every file of one generation lives in one
// timestamped directory that is never modified, and ..data is renamed to
// point at the next one. So load resolves ..data once and reads every file
// inside the directory it names, never through the per-file symlinks (each
// of which resolves ..data anew and could mix generations, for instance a
// new tls.crt with an old tls.key). If ..data moved meanwhile (the old
// directory may even be deleted under the read), the read starts over.
//
// Confinement: every file is opened through an os.Root of the directory,
// so that no symlink, at any hop, leads the read out of it (see resolve
// and readFile).
//
// With j, a read Start runs, load moves j from the file system to parsing
// once it has read every file, and gives up instead, clearing what it
// read, if Start abandoned it meanwhile (ok false).
func (a *Agent) load(w *fsnotify.Watcher, j *readJob) (_ loaded, ok bool) {
	if w != nil {
		a.watch(w)
	}
	names := a.fileNames()
	var files map[string][]byte
	var missing map[string]error
	var gone string // the target of ..data last found missing
	for attempt := 0; ; attempt++ {
		root, err := a.openRoot()
		if err != nil {
			return loaded{errs: []*loadError{{reasonDirectory, err}}}, true
		}
		gen, err := a.resolve(root)
		switch {
		case errors.Is(err, errGenerationGone) && gen == gone:
			// Twice the same target, missing both times: no swap, which
			// would have renamed ..data to a new directory before deleting
			// the old one. ..data points nowhere.
			root.Close()
			return loaded{errs: []*loadError{{reasonDirectory,
				fmt.Errorf("%s points to %s, which does not exist", dataDir, quote(gen))}}}, true
		case errors.Is(err, errGenerationGone):
			// ..data was swapped between its read and the look at its
			// target, which the kubelet then deleted: read again.
			root.Close()
			files, gone = nil, gen
		case err != nil:
			root.Close()
			return loaded{errs: []*loadError{{reasonDirectory, err}}}, true
		default:
			if a.readHook != nil {
				a.readHook(attempt)
			}
			files, missing = a.readFiles(root, gen, names)
			again, err := a.resolve(root)
			root.Close()
			if err != nil || again != gen {
				for _, b := range files {
					clear(b)
				}
				files = nil // the read raced a swap
			}
		}
		if files != nil {
			break
		}
		if attempt+1 == readAttempts {
			return loaded{errs: []*loadError{{reasonInconsistent,
				fmt.Errorf("%s changed during %d consecutive reads", dataDir, readAttempts)}}}, true
		}
	}

	if !j.toParse() {
		// Start returned while this read was in the file system: nobody
		// takes what it read.
		for _, b := range files {
			clear(b)
		}
		return loaded{}, false
	}
	if a.parseHook != nil {
		a.parseHook()
	}
	var l loaded
	if a.require&TicketKeys != 0 {
		r, e := parseRing(files, missing)
		if e != nil {
			l.errs = append(l.errs, e)
		} else {
			l.ring = r
		}
	}
	if a.require&Certificate != 0 {
		c, e := parseCert(files, missing)
		if e != nil {
			l.errs = append(l.errs, e)
		} else {
			l.cert = c
		}
	}
	ech, noECH, e := parseECH(files, missing, a.require&ECHKeys != 0)
	if e != nil {
		l.errs = append(l.errs, e)
	}
	l.ech, l.noECH = ech, noECH
	return l, true
}

func (a *Agent) fileNames() []string {
	var names []string
	if a.require&TicketKeys != 0 {
		names = append(names, keyring.FileName)
	}
	if a.require&Certificate != 0 {
		names = append(names, certFile, keyFile)
	}
	// ECH is served whenever the file is there.
	return append(names, echring.FileName)
}

// openRoot opens the directory, through which every file is read.
func (a *Agent) openRoot() (*os.Root, error) {
	fi, err := os.Stat(a.dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", a.dir)
	}
	return os.OpenRoot(a.dir)
}

// errGenerationGone is resolve's answer when ..data names a directory that
// no longer exists: a swap under the read, which the read survives by
// starting over, unless ..data still names it on the next attempt.
var errGenerationGone = errors.New("the directory ..data names is gone")

// resolve returns the generation to read: the target of ..data, a
// directory beside it, or "" for a plain directory without one. When that
// target does not exist it returns it with errGenerationGone.
//
// The kubelet points ..data at a timestamped directory beside it, itself
// no symlink. Anything else is refused: a target elsewhere (an absolute
// path, a path through other directories) would serve files from outside
// the volume, and so could a chain of links (..data -> ..hop -> /elsewhere),
// whose later hops, moreover, could change under a read that checks only
// the first.
func (a *Agent) resolve(root *os.Root) (gen string, err error) {
	target, err := root.Readlink(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", dataDir, err)
	}
	if target != filepath.Base(target) || target == "." || target == ".." {
		return "", fmt.Errorf("%s points to %s, not to an entry of %s", dataDir, quote(target), a.dir)
	}
	fi, err := root.Lstat(target)
	if errors.Is(err, fs.ErrNotExist) {
		return target, errGenerationGone
	}
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", dataDir, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("%s points to %s, itself a symlink: a chain of links may leave %s, and is refused", dataDir, quote(target), a.dir)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s points to %s, which is %s, not a directory", dataDir, quote(target), describe(fi.Mode()))
	}
	return target, nil
}

// readFiles reads names from gen, a directory of root; a file that cannot
// be read is reported in missing, with its error, rather than failing the
// whole read, because the caller first checks whether the read raced a
// swap. A file that is not there although a symlink of its name is (in gen,
// or the volume's visible link beside ..data) is reported as a
// *danglingError.
func (a *Agent) readFiles(root *os.Root, gen string, names []string) (files map[string][]byte, missing map[string]error) {
	files = make(map[string][]byte, len(names))
	missing = make(map[string]error)
	for _, n := range names {
		b, err := a.readFile(root, filepath.Join(gen, n))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				if d := dangling(root, gen, n); d != nil {
					err = d
				}
			}
			missing[n] = err
			continue
		}
		files[n] = b
	}
	return files, missing
}

// danglingError is a file whose name is a symlink to nothing: the kubelet
// swapped in a generation without the file and left its visible link (or
// something put it back), or a plain directory's link whose target is
// gone. It is fs.ErrNotExist to errors.Is, and yet not an absent file: the
// volume says the file belongs there.
type danglingError struct{ link, target string }

func (e *danglingError) Error() string {
	return fmt.Sprintf("%s is a symlink to %s, which does not exist", quote(e.link), quote(e.target))
}

func (e *danglingError) Unwrap() error { return fs.ErrNotExist }

// dangling reports the symlink of name that leads nowhere, in gen or at
// the top of the volume, or nil when there is none (the file is absent).
func dangling(root *os.Root, gen, name string) *danglingError {
	paths := []string{filepath.Join(gen, name)}
	if gen != "" {
		paths = append(paths, name)
	}
	for _, p := range paths {
		fi, err := root.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		if target, err := root.Readlink(p); err == nil {
			return &danglingError{link: p, target: target}
		}
	}
	return nil
}

// readFile reads a regular file of root without ever blocking on what it
// opens: O_NONBLOCK makes open(2) return at once even on a FIFO with no
// writer (or a device), and the type is then checked on the opened
// descriptor, not by an lstat before the open, which the path could
// change after. Only a regular file is read. The file may be a symlink,
// and so may its target, as long as no hop leaves the directory: os.Root
// refuses the open otherwise, and leaves names why.
func (a *Agent) readFile(root *os.Root, name string) ([]byte, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		if why, ok := leaves(root, name); ok {
			return nil, fmt.Errorf("%s: %s: refused, for it would read a file outside %s", filepath.Base(name), why, a.dir)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, not a regular file", filepath.Base(name), describe(fi.Mode()))
	}
	if fi.Size() > maxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", filepath.Base(name), maxFileSize)
	}
	// Sized from fstat, so that in the usual case the file's bytes land in
	// one buffer, which the caller clears after use, rather than in the
	// several that growing would leave behind.
	b := make([]byte, 0, fi.Size()+1)
	for {
		if len(b) == cap(b) {
			if len(b) > maxFileSize {
				clear(b)
				return nil, fmt.Errorf("%s is larger than %d bytes", filepath.Base(name), maxFileSize)
			}
			grown := append(b, 0)[:len(b)]
			clear(b)
			b = grown
		}
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			clear(b)
			return nil, err
		}
	}
}

// maxHops bounds the symlinks leaves follows, as the kernel does.
const maxHops = 40

// leaves follows the symlinks at name, a path of root, hop by hop, and
// reports the first one whose target lies outside root: absolute, or
// climbing above it. It only explains a refusal of os.Root's, which is
// what keeps reads inside.
func leaves(root *os.Root, name string) (string, bool) {
	p := name
	for range maxHops {
		fi, err := root.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return "", false
		}
		target, err := root.Readlink(p)
		if err != nil {
			return "", false
		}
		next := filepath.Join(filepath.Dir(p), target)
		if filepath.IsAbs(target) || !filepath.IsLocal(next) {
			return fmt.Sprintf("%s is a symlink to %s", quote(p), quote(target)), true
		}
		p = next
	}
	return fmt.Sprintf("%s is a chain of more than %d symlinks", quote(name), maxHops), true
}

func describe(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	default:
		return "of type " + m.Type().String()
	}
}

func missingReason(err error, ifMissing, otherwise reason) reason {
	if errors.Is(err, fs.ErrNotExist) {
		return ifMissing
	}
	return otherwise
}

// parseRing decodes the ring. What depends on the time or on the rings
// served before is judged by Agent.acceptRing.
func parseRing(files map[string][]byte, missing map[string]error) (*keyring.Ring, *loadError) {
	if err := missing[keyring.FileName]; err != nil {
		return nil, &loadError{missingReason(err, reasonRingMissing, reasonRingInvalid), fmt.Errorf("read %s: %w", keyring.FileName, err)}
	}
	data := files[keyring.FileName]
	r, err := keyring.Decode(data)
	clear(data)
	if err != nil {
		// keyring's errors name key ids, never key bytes.
		return nil, &loadError{reasonRingInvalid, fmt.Errorf("%s: %w", keyring.FileName, err)}
	}
	return &r, nil
}

// parseECH decodes the ECH ring; absent says that the file is not there,
// no entry of its name at all, which is an error only when required (or,
// as Agent.accept judges it, while an ECH ring is served). A symlink to
// nothing is not absent: it is ech_missing, New included. What depends on
// the time or on the rings served before is judged by Agent.acceptECH.
func parseECH(files map[string][]byte, missing map[string]error, required bool) (r *echring.Ring, absent bool, _ *loadError) {
	if err := missing[echring.FileName]; err != nil {
		var d *danglingError
		if errors.Is(err, fs.ErrNotExist) && !errors.As(err, &d) && !required {
			return nil, true, nil
		}
		return nil, false, &loadError{missingReason(err, reasonECHMissing, reasonECHInvalid), fmt.Errorf("read %s: %w", echring.FileName, err)}
	}
	data := files[echring.FileName]
	ring, err := echring.Decode(data)
	clear(data)
	if err != nil {
		// echring's errors name config ids, never key bytes.
		return nil, false, &loadError{reasonECHInvalid, fmt.Errorf("%s: %w", echring.FileName, err)}
	}
	return &ring, false, nil
}

// parseCert parses the pair; its validity period is judged by
// Agent.acceptCert.
func parseCert(files map[string][]byte, missing map[string]error) (*certificate, *loadError) {
	for _, n := range []string{certFile, keyFile} {
		if err := missing[n]; err != nil {
			return nil, &loadError{missingReason(err, reasonCertMissing, reasonCertInvalid), fmt.Errorf("read %s: %w", n, err)}
		}
	}
	crt, key := files[certFile], files[keyFile]
	defer clear(key)
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
	h := sha256.New()
	h.Write(crt)
	h.Write([]byte{0})
	h.Write(key)
	c := &certificate{tls: pair, notBefore: leaf.NotBefore, notAfter: leaf.NotAfter}
	h.Sum(c.sum[:0])
	return c, nil
}

// quote quotes text read from the directory for a message, in ASCII and
// cut short: messages end up in logs and Status.
func quote(s string) string {
	const most = 64
	if len(s) <= most {
		return strconv.QuoteToASCII(s)
	}
	return strconv.QuoteToASCII(s[:most]) + "..."
}
