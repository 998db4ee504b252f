package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// haproxyKeys is the tls-ticket-keys file the sidecar writes: the 3 keys
// HAProxy holds (keyring.HAProxyKeys), which it reads when it starts.
const haproxyKeys = "haproxy.keys"

// haproxyUpdated is HAProxy's answer to a "set ssl tls-key" it carried out.
const haproxyUpdated = "TLS ticket key updated!"

// haproxy feeds an HAProxy in the same pod through its runtime API (a
// "stats socket ... level admin" on the shared directory), without a
// reload: "set ssl tls-key <file> <key>" writes the key into HAProxy's
// oldest slot, and the slot after the one that encrypted now encrypts, as
// appending a line to the file and reloading would. The sidecar reads
// HAProxy's slots back ("show tls-keys <file>"), sends the fewest commands
// that bring them to keyring.HAProxyKeys, and reads them back again. Every
// tls-ticket-keys reference whose file is named haproxy.keys is kept so.
type haproxy struct {
	dir    string
	socket string
	probe  *prober
}

func (h *haproxy) apply(ctx context.Context, keys []agent.TicketKey) (applied, error) {
	ring := asKeys(keys)
	slots, ok := keyring.HAProxyKeys(ring)
	if !ok {
		return applied{}, fail(causeCheck, "no key to give HAProxy")
	}
	var want [keyring.HAProxySlots][]byte
	// Sized once, so that no copy of the keys is left behind by growing.
	file := make([]byte, 0, keyring.HAProxySlots*(base64.StdEncoding.EncodedLen(keyring.FormatKeySize)+1))
	for i, k := range slots {
		d, _ := keyring.DeriveKey(k.Secret, keyring.FormatHAProxy)
		want[i] = base64.StdEncoding.AppendEncode(nil, d[:])
		clear(d[:])
		file = append(append(file, want[i]...), '\n')
	}
	held := applied{held: []string{slots[0].ID, slots[1].ID, slots[2].ID}}
	for i := range ring {
		clear(ring[i].Secret[:])
	}
	for i := range slots {
		clear(slots[i].Secret[:])
	}
	defer func() {
		wipeSlots(want)
		clear(file)
	}()
	if _, err := writeFile(h.dir, haproxyKeys, file); err != nil {
		return applied{}, fail(causeWrite, "%w", err)
	}

	refs, err := h.refs(ctx)
	if err != nil {
		return applied{}, err
	}
	for _, ref := range refs {
		took, err := h.set(ctx, ref, want)
		if err != nil {
			return applied{}, err
		}
		held.took = held.took || took
	}
	if h.probe != nil && held.took {
		d := derive(keys[0], keyring.FormatHAProxy)
		err := confirm(ctx, h.probe, d[:keyNameSize])
		clear(d[:])
		if err != nil {
			return applied{}, err
		}
	}
	return held, nil
}

// set brings the slots of ref to want, and reports whether it changed them.
func (h *haproxy) set(ctx context.Context, ref string, want [keyring.HAProxySlots][]byte) (bool, error) {
	have, err := h.slots(ctx, ref)
	if err != nil {
		return false, err
	}
	sets := haproxyPlan(have, want)
	wipeSlots(have)
	if len(sets) == 0 {
		return false, nil
	}
	// One line, so that HAProxy carries the commands out back to back.
	var line []byte
	for i, k := range sets {
		if i > 0 {
			line = append(line, "; "...)
		}
		line = append(append(append(line, "set ssl tls-key "...), ref...), ' ')
		line = append(line, k...)
	}
	out, err := h.command(ctx, line)
	clear(line)
	if err != nil {
		return false, err
	}
	n := bytes.Count(out, []byte(haproxyUpdated))
	answer := firstLine(out, sets)
	clear(out)
	if n != len(sets) {
		return false, fail(causeRuntimeAPI, "HAProxy carried out %d of %d set ssl tls-key on %s: %s", n, len(sets), ref, answer)
	}
	have, err = h.slots(ctx, ref)
	if err != nil {
		return false, err
	}
	taken := len(haproxyPlan(have, want)) == 0
	wipeSlots(have)
	if !taken {
		return false, fail(causeNotTaken, "HAProxy's slots of %s differ from the keys set", ref)
	}
	return true, nil
}

// haproxyPlan returns the keys to set, in order, to bring HAProxy's slots
// from have to want (each in the order "show tls-keys" lists them: oldest,
// encrypting, next). Each set shifts the slots by one, so the fewest sets
// are those that reuse the longest tail of have as the head of want: one at
// a rotation, whose staged key was already in the next slot.
//
// Between two sets of one plan, HAProxy encrypts for an instant with the
// key then in its middle slot: one of have or want. When the next staged
// key arrives after the active one activated (a scheduled rotation, as
// opposed to rotate-now), that is for an instant the key just retired,
// which every replica still holds. Keeping that key, HAProxy's one
// decrypt-only key, costs the two extra sets.
func haproxyPlan(have, want [keyring.HAProxySlots][]byte) [][]byte {
	n := keyring.HAProxySlots
	for k := 0; k < n; k++ {
		match := true
		for i := 0; i < n-k && match; i++ {
			match = bytes.Equal(have[i+k], want[i])
		}
		if match {
			return want[n-k:]
		}
	}
	return want[:]
}

// refs returns the tls-ticket-keys references HAProxy loaded from a file
// named haproxy.keys.
func (h *haproxy) refs(ctx context.Context) ([]string, error) {
	out, err := h.command(ctx, []byte("show tls-keys"))
	if err != nil {
		return nil, err
	}
	// "# id (file)" then one "<id> (<file>)" per reference.
	var refs []string
	for line := range strings.Lines(string(out)) {
		_, rest, ok := strings.Cut(strings.TrimSpace(line), " (")
		path, closed := strings.CutSuffix(rest, ")")
		if !ok || !closed || strings.HasPrefix(line, "#") {
			continue
		}
		if filepath.Base(path) == haproxyKeys && !strings.ContainsAny(path, " \t;\\") {
			refs = append(refs, path)
		}
	}
	if len(refs) == 0 {
		return nil, fail(causeRuntimeAPI, "HAProxy loaded no tls-ticket-keys file named %s: add tls-ticket-keys <shared directory>/%s to its bind lines", haproxyKeys, haproxyKeys)
	}
	return refs, nil
}

// slots reads the keys of ref from HAProxy, base64, in its order. The
// caller overwrites them after use.
func (h *haproxy) slots(ctx context.Context, ref string) ([keyring.HAProxySlots][]byte, error) {
	var slots [keyring.HAProxySlots][]byte
	out, err := h.command(ctx, []byte("show tls-keys "+ref))
	if err != nil {
		return slots, err
	}
	defer clear(out)
	// "# id secret", "# <id> (<file>)", then "<id>.<n> <base64>" per slot.
	n := 0
	for _, line := range bytes.Split(out, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) != 2 || f[0][0] == '#' {
			continue
		}
		if n == keyring.HAProxySlots {
			wipeSlots(slots)
			return slots, fail(causeRuntimeAPI, "HAProxy lists more than %d keys for %s", keyring.HAProxySlots, ref)
		}
		slots[n] = bytes.Clone(f[1])
		n++
	}
	if n != keyring.HAProxySlots {
		wipeSlots(slots)
		return slots, fail(causeRuntimeAPI, "HAProxy lists %d keys for %s, not %d", n, ref, keyring.HAProxySlots)
	}
	return slots, nil
}

// command sends one line to HAProxy's runtime API and returns its answer,
// which the caller overwrites after use.
func (h *haproxy) command(ctx context.Context, line []byte) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", h.socket)
	if err != nil {
		return nil, fail(causeNoServer, "HAProxy's runtime API: %w", err)
	}
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	msg := append(bytes.Clone(line), '\n')
	_, err = c.Write(msg)
	clear(msg)
	if err != nil {
		return nil, fail(causeRuntimeAPI, "HAProxy's runtime API: %w", err)
	}
	// Without "prompt", HAProxy answers and closes the connection.
	out, err := io.ReadAll(c)
	if err != nil {
		clear(out)
		return nil, fail(causeRuntimeAPI, "HAProxy's runtime API: %w", err)
	}
	return out, nil
}

func asKeys(keys []agent.TicketKey) []keyring.Key {
	out := make([]keyring.Key, len(keys))
	for i, k := range keys {
		out[i] = keyring.Key{ID: k.ID, ActiveFrom: k.ActiveFrom, ExpiresAt: k.ExpiresAt, Secret: k.Secret}
	}
	return out
}

func wipeSlots(s [keyring.HAProxySlots][]byte) {
	for _, b := range s {
		clear(b)
	}
}

// firstLine quotes the first line of an answer of HAProxy's to a set, for
// an error message. HAProxy's answers quote no key, but whatever answers on
// its socket might: a line holding 16 characters of any of keys (what was
// set) is not shown.
func firstLine(out []byte, keys [][]byte) string {
	line, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
	const fragment = 16
	for _, k := range keys {
		for i := 0; i+fragment <= len(k); i++ {
			if bytes.Contains(line, k[i:i+fragment]) {
				return "(an answer quoting the keys set, not shown)"
			}
		}
	}
	return fmt.Sprintf("%.200q", line)
}
