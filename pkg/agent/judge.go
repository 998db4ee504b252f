package agent

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

// accept judges what a read found at now, against what the agent served
// before, and takes the ring and the certificate that pass. It returns
// every reason to refuse, the read's own included.
func (a *Agent) accept(now time.Time, l loaded) []*loadError {
	errs := l.errs
	if l.ring != nil {
		if e := a.acceptRing(now, l.ring); e != nil {
			errs = append(errs, e)
		}
	}
	if l.cert != nil {
		if e := a.acceptCert(now, l.cert); e != nil {
			errs = append(errs, e)
		}
	}
	switch {
	case l.ech != nil:
		if e := a.acceptECH(now, l.ech); e != nil {
			errs = append(errs, e)
		}
	case l.noECH:
		if e := a.echGone(now); e != nil {
			errs = append(errs, e)
		}
	}
	return errs
}

// acceptRing takes r, a ring just decoded, if it is within the API's
// bounds, is the ring the agent serves, does not go back, and holds a key
// usable at now or no key at all. It keeps a copy of r's usable keys, and overwrites r's.
func (a *Agent) acceptRing(now time.Time, r *keyring.Ring) *loadError {
	defer wipe(r)
	// The file's ring name is printed only when it is the name pinned: a
	// valid name may still be anything of the API's alphabet, key bytes in
	// hex included, in a corrupt or hostile file.
	name := "the ring"
	if r.Name == a.pin.name {
		name = "ring " + r.Name
	}
	if len(r.Keys) > keyring.MaxKeys {
		return &loadError{reasonRingTooLarge, fmt.Errorf("%s: %w: %s epoch %d holds %d keys; a ring holds at most %d (%d retained, the active and the staged key)",
			keyring.FileName, ErrTooManyKeys, name, r.Epoch, len(r.Keys), keyring.MaxKeys, keyring.MaxRetainedKeys)}
	}
	if a.pin.name != "" && r.Name != a.pin.name {
		return &loadError{reasonRingForeign, fmt.Errorf("%s: %w: holds another ring than ring %s, the one this agent serves",
			keyring.FileName, ErrForeignRing, a.pin.name)}
	}
	d := digest(r)
	if a.pin.epoch > 0 {
		if r.Epoch < a.pin.epoch {
			return &loadError{reasonRingRollback, fmt.Errorf("%s: %w: ring %s epoch %d is older than epoch %d, already served",
				keyring.FileName, ErrRollback, r.Name, r.Epoch, a.pin.epoch)}
		}
		if r.Epoch == a.pin.epoch && d != a.pin.digest {
			return &loadError{reasonRingEpochConflict, fmt.Errorf("%s: %w: ring %s epoch %d differs from the epoch %d already served",
				keyring.FileName, ErrEpochConflict, r.Name, r.Epoch, a.pin.epoch)}
		}
	}
	keys := make([]keyring.Key, 0, len(r.Keys))
	var kept []string
	for i := range r.Keys {
		k := &r.Keys[i]
		switch {
		case !now.Before(k.ExpiresAt):
		case a.destroyed[k.ID]:
			kept = append(kept, k.ID)
		default:
			keys = append(keys, *k)
		}
	}
	// A ring published without keys is the operator's record that every
	// key expired while none could be minted: it is taken, as a newer epoch
	// dropping every key, and crypto/tls's own keys stand in. Only a ring
	// whose keys are all unusable here is refused.
	if len(keys) == 0 && len(r.Keys) > 0 {
		msg := "every key has expired"
		if len(kept) > 0 {
			msg += " or was destroyed here"
		}
		return &loadError{reasonRingExpired, fmt.Errorf("%s: %s epoch %d: %s", keyring.FileName, name, r.Epoch, msg)}
	}
	a.keptOut(kept, now)
	next := &keyring.Ring{Name: r.Name, Epoch: r.Epoch, IssuedAt: r.IssuedAt, Keys: keys}
	if a.ring != nil {
		// A key that a newer epoch left out was removed on purpose (an
		// early removal, a lower retainedKeys): it never comes back.
		for i := range a.ring.Keys {
			if _, ok := next.Key(a.ring.Keys[i].ID); !ok {
				a.destroyed[a.ring.Keys[i].ID] = true
			}
		}
		wipe(a.ring)
	}
	a.ring = next
	a.pin = pin{name: r.Name, epoch: r.Epoch, digest: d}
	return nil
}

// keptOut logs, once per set and at most once per flapWindow, the ids of
// destroyed keys that a ring read at now still holds unexpired by the
// agent's clock: the clock went back, or the file is older than it says.
func (a *Agent) keptOut(ids []string, now time.Time) {
	key := fmt.Sprint(ids)
	if len(ids) > 0 && key != a.kept && a.quiet("kept out: "+key, now) {
		a.log.Warn("Kept destroyed ticket keys out of the ring read; the clock may have gone back", "keyIDs", ids)
	}
	if len(ids) == 0 {
		key = ""
	}
	a.kept = key
}

// acceptCert takes c if it is valid at now, give or take CertificateSkew
// for its start.
func (a *Agent) acceptCert(now time.Time, c *certificate) *loadError {
	leaf := c.tls.Leaf
	if now.Add(CertificateSkew).Before(c.notBefore) {
		return &loadError{reasonCertNotYetValid, fmt.Errorf("%s: %w: certificate serial %s is valid from %s, more than %s ahead of this host's clock",
			certFile, ErrNotYetValid, leaf.SerialNumber, c.notBefore.UTC().Format(time.RFC3339), CertificateSkew)}
	}
	if !now.Before(c.notAfter) {
		return &loadError{reasonCertExpired, fmt.Errorf("%s: certificate serial %s expired at %s",
			certFile, leaf.SerialNumber, c.notAfter.UTC().Format(time.RFC3339))}
	}
	a.cert = c
	return nil
}

// expire destroys the keys of the ring served whose expiresAt has come:
// their ids are never taken again, and their bytes are overwritten.
func (a *Agent) expire(now time.Time) {
	if a.ring == nil || !slices.ContainsFunc(a.ring.Keys, func(k keyring.Key) bool { return !now.Before(k.ExpiresAt) }) {
		return
	}
	keys := make([]keyring.Key, 0, len(a.ring.Keys))
	for i := range a.ring.Keys {
		k := &a.ring.Keys[i]
		if now.Before(k.ExpiresAt) {
			keys = append(keys, *k)
			continue
		}
		a.destroyed[k.ID] = true
		a.log.Info("Destroyed expired ticket key", "ring", a.ring.Name, "keyID", k.ID, "expiresAt", k.ExpiresAt.UTC())
	}
	next := &keyring.Ring{Name: a.ring.Name, Epoch: a.ring.Epoch, IssuedAt: a.ring.IssuedAt, Keys: keys}
	wipe(a.ring)
	a.ring = next
}

// wipe overwrites the secrets of r's keys.
func wipe(r *keyring.Ring) {
	if r == nil {
		return
	}
	for i := range r.Keys {
		clear(r.Keys[i].Secret[:])
	}
}

// digest identifies the content of a ring, to tell a re-read of the epoch
// served from another ring under the same epoch.
func digest(r *keyring.Ring) [sha256.Size]byte {
	h := sha256.New()
	b := binary.BigEndian.AppendUint64(nil, uint64(len(r.Name)))
	b = append(b, r.Name...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Epoch))
	b = appendTime(b, r.IssuedAt)
	h.Write(b)
	for i := range r.Keys {
		k := &r.Keys[i]
		b = append(b[:0], k.ID...)
		for _, t := range []time.Time{k.ActiveFrom, k.RetireAt, k.ExpiresAt} {
			b = appendTime(b, t)
		}
		h.Write(b)
		h.Write(k.Secret[:])
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// appendTime appends t as an instant; UnixNano would overflow past 2262,
// and ticketkeys.json carries years up to 9999.
func appendTime(b []byte, t time.Time) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(t.Unix()))
	return binary.BigEndian.AppendUint32(b, uint32(t.Nanosecond()))
}
