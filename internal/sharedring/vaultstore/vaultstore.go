// Package vaultstore keeps shared rings in Vault: the entries of a key
// source's KV v2 engine, read and written with the key source's own Vault
// client and token (internal/mint), under its budget of calls at once. The
// record and its policy are package sharedring's.
package vaultstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	vault "github.com/hashicorp/vault/api"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/mint"
	"github.com/ringmaster-io/ringmaster/internal/sharedring"
)

// ErrLostRace is the error of a write to a shared ring that another
// operator's write beat: the entry is no longer at the version read.
var ErrLostRace = errors.New("another operator wrote the shared ring first")

// Store is where a key source keeps shared rings: entries of Vault's KV v2
// engine, read and written with the key source's own Vault client and
// token.
//
// Every Vault call of a shared ring runs under the key source's budget, so
// that a Vault that does not answer holds up only the rings that use it: at
// most SharedCalls calls of one key source at once, a call that finds them
// all in progress gives up after SharedWait, and a read gives up after
// SharedReadTimeout. A reconcile worker is thus held by an unreachable Vault
// for one read at most, and no more than SharedCalls workers at a time,
// whatever the number of its rings; the ring fails closed meanwhile.
type Store struct {
	vault       *mint.Vault
	kv          *vault.KVv2
	mount, path string
	maxVersions int
	// readTimeout bounds each read, and writeTimeout each write or mint;
	// zero means SharedReadTimeout and mint.DefaultTimeout.
	readTimeout, writeTimeout time.Duration
}

// The budget of a key source's shared rings.
const (
	// SharedCalls is how many Vault calls of one key source's shared rings
	// run at once. It stays below the rings' workers (DefaultRingWorkers),
	// so that one key source can never hold them all.
	SharedCalls = 2
	// SharedWait is how long a call waits for one of them. Calls to a Vault
	// that answers take milliseconds.
	SharedWait = 250 * time.Millisecond
	// SharedReadTimeout bounds a read of a shared ring's entry, or of its
	// metadata: a shared ring reads its entry every few seconds, and a read
	// that fails is retried at the next sync.
	SharedReadTimeout = 5 * time.Second
)

// DefaultMaxVersions is how many versions of an entry Vault keeps when the
// key source does not say.
const DefaultMaxVersions = 5

// Shares reports whether the key source shares the rings of namespace ns,
// whose namespace carries nsLabels: a ClusterTicketKeyRing's (ns empty)
// whenever it shares rings; a TicketKeyRing's only when
// sharedRings.namespaceSelector matches its namespace. Sharing is the
// administrator's act: without a selector, no TicketKeyRing is shared.
func Shares(cks *v1alpha1.ClusterKeySource, ns string, nsLabels labels.Set) (bool, error) {
	if cks == nil || cks.Spec.Vault == nil || cks.Spec.Vault.SharedRings == nil {
		return false, nil
	}
	if ns == "" {
		return true, nil
	}
	sel := cks.Spec.Vault.SharedRings.NamespaceSelector
	if sel == nil {
		return false, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, fail(v1alpha1.ReasonVaultConfig, "ClusterKeySource %s has an invalid spec.vault.sharedRings.namespaceSelector: %v", cks.Name, err)
	}
	return s.Matches(nsLabels), nil
}

// For returns where a key source keeps shared rings, with its Vault client
// from sources; nil when the key source does not share rings (see Shares
// for whose).
func For(ctx context.Context, sources *mint.Sources, cks *v1alpha1.ClusterKeySource) (*Store, error) {
	if cks == nil || cks.Spec.Vault == nil || cks.Spec.Vault.SharedRings == nil {
		return nil, nil
	}
	v, err := sources.VaultFor(ctx, cks)
	if err != nil {
		return nil, err
	}
	sr := cks.Spec.Vault.SharedRings
	mount := strings.Trim(cmp.Or(sr.Mount, "secret"), "/")
	return &Store{vault: v, kv: v.KVv2(mount), mount: mount, path: strings.Trim(sr.Path, "/"),
		maxVersions: cmp.Or(int(sr.MaxVersions), DefaultMaxVersions),
		readTimeout: min(sources.CallTimeout(), SharedReadTimeout), writeTimeout: sources.CallTimeout()}, nil
}

// Entry is the entry of the ring ns/name under the key source's path: a
// ClusterTicketKeyRing (ns empty) under cluster/, a TicketKeyRing under its
// own namespace, so that a tenant's ring never names another's entry.
func (s *Store) Entry(ns, name string) string {
	if ns == "" {
		return s.path + "/cluster/" + name
	}
	return s.path + "/namespaces/" + ns + "/" + name
}

// Location is the entry as status shows it: mount and entry path.
func (s *Store) Location(entry string) string { return s.mount + "/" + entry }

// Read returns the entry's newest version, or nil when the entry does not
// exist. ring is the name the entry's ring must carry.
func (s *Store) Read(ctx context.Context, entry, ring string) (*sharedring.Record, error) {
	var got *vault.KVSecret
	err := s.call(ctx, s.reads(), "read shared ring "+s.Location(entry), func(ctx context.Context) (err error) {
		got, err = s.kv.Get(ctx, entry)
		return err
	})
	if errors.Is(err, vault.ErrSecretNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if got.VersionMetadata == nil || got.VersionMetadata.Version < 1 {
		return nil, fail(v1alpha1.ReasonVaultBadResponse, "vault answered shared ring %s without a version", s.Location(entry))
	}
	meta := got.VersionMetadata
	if got.Data == nil {
		return &sharedring.Record{Version: int64(meta.Version), Created: meta.CreatedTime, Deleted: true}, nil
	}
	rec, err := sharedring.Decode(got.Data, ring)
	if err != nil {
		return nil, fail(v1alpha1.ReasonVaultBadResponse, "shared ring %s version %d: %v", s.Location(entry), meta.Version, err)
	}
	rec.Version, rec.Created = int64(meta.Version), meta.CreatedTime
	return &rec, nil
}

// Write writes rec as the entry's next version, with check-and-set on cas,
// the version read (0: the entry must not exist yet). It fails with
// ErrLostRace when another writer got there first, and returns rec with
// the version and time Vault gave it otherwise.
func (s *Store) Write(ctx context.Context, entry string, cas int64, rec sharedring.Record) (sharedring.Record, error) {
	data, err := sharedring.Encode(rec)
	if err != nil {
		return rec, fmt.Errorf("encode shared ring %s: %w", s.Location(entry), err)
	}
	var put *vault.KVSecret
	err = s.call(ctx, s.writes(), "write shared ring "+s.Location(entry), func(ctx context.Context) (err error) {
		put, err = s.kv.Put(ctx, entry, data, vault.WithCheckAndSet(int(cas)))
		if lostRace(err) {
			return ErrLostRace
		}
		return err
	})
	if err != nil {
		return rec, err
	}
	if put == nil || put.VersionMetadata == nil || int64(put.VersionMetadata.Version) != cas+1 {
		return rec, fail(v1alpha1.ReasonVaultBadResponse, "vault answered the write of shared ring %s without version %d", s.Location(entry), cas+1)
	}
	rec.Version, rec.Created = cas+1, put.VersionMetadata.CreatedTime
	rec.Ring.Epoch = rec.Version
	return rec, nil
}

// lostRace tells KV v2's refusal of a check-and-set write.
func lostRace(err error) bool {
	var re *vault.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusBadRequest &&
		strings.Contains(strings.Join(re.Errors, " "), "check-and-set")
}

// Sweep destroys, for good, every version of the entry older than current
// that holds a key current does not have (an expired, revoked or dropped
// key), or that cannot be read; and it makes the entry keep at most the key
// source's maxVersions versions and require check-and-set on every write.
// It returns the versions it destroyed.
func (s *Store) Sweep(ctx context.Context, entry string, current sharedring.Record) ([]int64, error) {
	var meta *vault.KVMetadata
	if err := s.call(ctx, s.reads(), "read the metadata of shared ring "+s.Location(entry), func(ctx context.Context) (err error) {
		meta, err = s.kv.GetMetadata(ctx, entry)
		return err
	}); err != nil {
		return nil, err
	}
	if meta.MaxVersions != s.maxVersions || !meta.CASRequired {
		if err := s.call(ctx, s.writes(), "set the version limit of shared ring "+s.Location(entry), func(ctx context.Context) error {
			return s.kv.PutMetadata(ctx, entry, vault.KVMetadataPutInput{MaxVersions: s.maxVersions, CASRequired: true})
		}); err != nil {
			return nil, err
		}
	}
	var stale []int
	for key, v := range meta.Versions {
		n, err := strconv.Atoi(key)
		if err != nil || int64(n) >= current.Version || v.Destroyed {
			continue
		}
		if s.holdsStale(ctx, entry, n, v, current) {
			stale = append(stale, n)
		}
	}
	if len(stale) == 0 {
		return nil, nil
	}
	slices.Sort(stale)
	if err := s.call(ctx, s.writes(), "destroy old versions of shared ring "+s.Location(entry), func(ctx context.Context) error {
		return s.kv.Destroy(ctx, entry, stale)
	}); err != nil {
		return nil, err
	}
	out := make([]int64, len(stale))
	for i, n := range stale {
		out[i] = int64(n)
	}
	return out, nil
}

// holdsStale reports whether version n must be destroyed: it was deleted
// (its bytes stay until destroyed), cannot be read, or holds a key current
// no longer has.
func (s *Store) holdsStale(ctx context.Context, entry string, n int, v vault.KVVersionMetadata, current sharedring.Record) bool {
	if !v.DeletionTime.IsZero() {
		return true
	}
	var got *vault.KVSecret
	if err := s.call(ctx, s.reads(), "read shared ring "+s.Location(entry), func(ctx context.Context) (err error) {
		got, err = s.kv.GetVersion(ctx, entry, n)
		return err
	}); err != nil || got == nil || got.Data == nil {
		return true
	}
	old, err := sharedring.Decode(got.Data, current.Ring.Name)
	return err != nil || sharedring.Stale(old.Ring, current.Ring)
}

// Fill mints the keys plan needs for a shared ring, under the key
// source's budget, and returns the completed ring: all of them or none.
func (s *Store) Fill(ctx context.Context, plan keyring.Plan) (keyring.Ring, error) {
	if plan.Mint == 0 {
		return plan.Ring, nil
	}
	var secrets []keyring.Secret
	if err := s.call(ctx, s.writes(), "mint keys", func(ctx context.Context) (err error) {
		secrets, err = s.vault.Mint(ctx, plan.Mint)
		return err
	}); err != nil {
		return keyring.Ring{}, err
	}
	next, err := plan.Fill(secrets)
	if err != nil {
		return keyring.Ring{}, &mint.Error{Reason: v1alpha1.ReasonVaultBadResponse, Err: err}
	}
	return next, nil
}

func (s *Store) reads() time.Duration { return cmp.Or(s.readTimeout, SharedReadTimeout) }

func (s *Store) writes() time.Duration { return cmp.Or(s.writeTimeout, mint.DefaultTimeout) }

// call runs one Vault call of a shared ring within timeout, under the key
// source's budget: it waits at most SharedWait for one of the SharedCalls
// slots, and fails with VaultUnavailable when none frees, without calling.
func (s *Store) call(ctx context.Context, timeout time.Duration, what string, req func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait := time.NewTimer(SharedWait)
	defer wait.Stop()
	select {
	case s.vault.Slots(SharedCalls) <- struct{}{}:
	case <-wait.C:
		return fail(v1alpha1.ReasonVaultUnavailable, "%s: the key source's %d Vault calls for shared rings are all in progress: vault answers slowly or not at all", what, SharedCalls)
	case <-ctx.Done():
		return mint.Classify(what, ctx.Err())
	}
	defer func() { <-s.vault.Slots(SharedCalls) }()
	return s.vault.Do(ctx, what, func() error { return req(ctx) }, ErrLostRace)
}

func fail(reason, format string, args ...any) error {
	return &mint.Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}
