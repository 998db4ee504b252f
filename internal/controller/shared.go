package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/distribute"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/mint"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	ticketplan "github.com/ringmaster-io/ringmaster/internal/ringplan/ticket"
	"github.com/ringmaster-io/ringmaster/internal/sharedring"
	"github.com/ringmaster-io/ringmaster/internal/sharedring/vaultstore"
	"github.com/ringmaster-io/ringmaster/internal/written"
)

// sharing is a shared ring's entry as one reconcile sees it. Its methods
// take a nil sharing for a ring that is not shared.
type sharing struct {
	store *vaultstore.Store
	entry string
	local sharedring.Local
	// policy is the ring's own, which the entry must record.
	policy sharedring.Policy
	// read is the newest version read; nil when the entry does not exist.
	read *sharedring.Record
	// planFrom is the ring to plan from (sharedring.Base), when err is nil.
	planFrom keyring.Ring
	// err says why the entry cannot be used this time: Vault could not be
	// read or answered garbage, the entry went back, or the ring's spec asks
	// what a shared ring cannot do. The ring then fails closed.
	err    error
	status v1alpha1.SharedRingStatus
	// memory is the operator's, of the entries its rings serve.
	memory *written.Shared
}

// share reads the ring's shared entry; nil for a ring its key source does
// not share (or that cannot use it: minting then says why). A TicketKeyRing
// of a namespace the key source's sharedRings.namespaceSelector does not
// select is not shared: it mints from the key source and keeps its keys in
// this cluster, and never reads the entry its name would have.
func (r *rings) share(ctx context.Context, rg ring, src keySource, policy keyring.Policy, local keyring.Ring, newest *corev1.Secret, now time.Time) *sharing {
	if src.err != nil || src.cks == nil {
		return nil
	}
	shared, err := vaultstore.Shares(src.cks, rg.namespace, src.nsLabels)
	if !shared && err == nil {
		return nil
	}
	var store *vaultstore.Store
	if err == nil {
		store, err = vaultstore.For(ctx, r.Sources, src.cks)
	}
	if store == nil && err == nil {
		return nil
	}
	sh := &sharing{store: store, local: sharedring.Local{Ring: local, Version: distribute.SharedVersion(newest)},
		policy: sharedring.PolicyOf(policy), err: err, memory: &r.memory}
	if rg.status.Shared != nil {
		sh.status = *rg.status.Shared
	}
	if store == nil {
		return sh
	}
	sh.entry = store.Entry(rg.namespace, rg.obj.GetName())
	sh.status.Path = store.Location(sh.entry)
	if rg.spec.Confirmation != nil {
		sh.err = &mint.Error{Reason: v1alpha1.ReasonSharedRingUnsupported,
			Err: errors.New("spec.confirmation cannot gate a ring shared across clusters: one cluster's pods cannot confirm for every cluster; remove it or use a key source without sharedRings")}
		return sh
	}
	// The read runs under the key source's budget (vaultstore.Store): a Vault
	// that does not answer fails it within vaultstore.SharedReadTimeout.
	if sh.read, sh.err = store.Read(ctx, sh.entry, local.Name); sh.err != nil {
		return sh
	}
	sh.status.LastSyncTime = &metav1.Time{Time: now.Truncate(time.Second)}
	var mismatch *sharedring.Mismatch
	switch sh.planFrom, err = sharedring.Base(sh.local, sh.policy, sh.read); {
	case errors.As(err, &mismatch):
		sh.err = &mint.Error{Reason: v1alpha1.ReasonSharedRingPolicyMismatch,
			Err: fmt.Errorf("shared ring %s version %d: %w. Another cluster wrote it under its own spec: this cluster writes nothing to the entry and adopts none of its keys. Give %s the same values as the other clusters, or, to change the policy everywhere, change every cluster's spec, then delete the entry's current version (vault kv delete %s) for the first cluster to write to seed it again",
				sh.status.Path, sh.read.Version, err, strings.Join(prefixed("spec.", mismatch.Fields), ", "), sh.status.Path)}
	case err != nil:
		sh.err = &mint.Error{Reason: v1alpha1.ReasonSharedRingRolledBack,
			Err: fmt.Errorf("shared ring %s: %w; delete the entry in Vault to have this cluster seed it again from the keys it serves", sh.status.Path, err)}
	}
	return sh
}

func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

// report is the ring's status.shared after this reconcile; nil for a ring
// that is not shared.
func (sh *sharing) report() *v1alpha1.SharedRingStatus {
	if sh == nil || sh.store == nil {
		return nil
	}
	st := ticketplan.SharedStatus(sh.status, sh.read, sh.err == nil, sh.memory.Adopted(sh.status.Path))
	return &st
}

// problem is the Ready problem of a ring that fails closed.
func (sh *sharing) problem(rg ring) *ringplan.Problem {
	// What the entry holds is the ring's own; how Vault is reached and
	// logged in to is the key source's (ring.sourceError).
	msg := sh.err.Error()
	switch mint.ReportedReason(sh.err) {
	case v1alpha1.ReasonVaultBadResponse, v1alpha1.ReasonSharedRingRolledBack, v1alpha1.ReasonSharedRingUnsupported:
	default:
		msg = rg.sourceError(sh.err)
	}
	return &ringplan.Problem{Reason: mint.ReportedReason(sh.err),
		Message: fmt.Sprintf("%s. This cluster publishes nothing new and keeps serving its keys; expired keys are still destroyed", msg)}
}

// plain is the entry as ringplan sees it; nil for a ring that is not
// shared.
func (sh *sharing) plain(rg ring) *ticketplan.Shared {
	if sh == nil {
		return nil
	}
	p := &ticketplan.Shared{Entry: sh.read, Base: sh.planFrom, Policy: sh.policy, LocalVersion: sh.local.Version}
	if sh.err != nil {
		p.Blocked = sh.problem(rg)
	}
	return p
}

// syncShared carries out what res says of the ring's shared entry: it
// records an adoption of the version read, or writes res.Next as the
// entry's next version and folds the write's outcome in (ticketplan.Wrote).
// A write that loses the race publishes nothing: the next pass,
// ticketplan.LostRaceRetry later, adopts the winner's version. The result
// carries the ring's status.shared.
func (r *rings) syncShared(ctx context.Context, rg ring, rd ticketplan.Read, sh *sharing, in ticketplan.Result) (res ticketplan.Result) {
	res = in
	if sh == nil {
		return res // not shared, or not read (a ring being deleted): as Finish said
	}
	// Whatever the branch, the status reports the entry as it ends.
	defer func() { res.SharedStatus = sh.report() }()
	switch {
	case res.Sync == nil:
		return res
	case !res.Sync.Write:
		if res.Adopt {
			// Now, not the reconcile's start: the version may have been
			// written after it.
			sh.adopted(r.Clock.Now())
		}
		return res
	}
	rec, err := sh.store.Write(ctx, sh.entry, res.Sync.CAS, res.Sync.Record)
	w := ticketplan.Written{Version: rec.Version, Err: err, LostRace: errors.Is(err, vaultstore.ErrLostRace)}
	switch {
	case w.LostRace:
		sharedWritesTotal.WithLabelValues("lost").Inc()
		log.FromContext(ctx).Info("Lost the race to write the shared ring; adopting the winner's version", "entry", sh.status.Path, "version", res.Sync.CAS+1)
	case err != nil:
		sh.err = err
		w.Problem = sh.problem(rg)
	default:
		sharedWritesTotal.WithLabelValues("won").Inc()
		sh.read = &rec
		sh.status = ticketplan.WroteStatus(sh.status, rec)
		log.FromContext(ctx).Info("Wrote shared ring version", "entry", sh.status.Path, "version", rec.Version)
	}
	res = ticketplan.Wrote(rd, res, w)
	return res
}

// adopted records that this cluster publishes the version it read, which
// another cluster wrote.
func (sh *sharing) adopted(now time.Time) {
	if sh.read == nil {
		return
	}
	var delay time.Duration
	sh.status, delay = ticketplan.Adopted(sh.status, *sh.read, now)
	sharedPropagationSeconds.Observe(delay.Seconds())
	sh.memory.Adopt(sh.status.Path, sh.status)
}

// sweep destroys the stale versions of the entry, once per version of it
// this operator learns of (written.Shared).
func (r *rings) sweep(ctx context.Context, sh *sharing) error {
	if sh == nil || sh.err != nil || sh.read == nil || sh.read.Deleted || !r.memory.Unswept(sh.status.Path, sh.read.Version) {
		return nil
	}
	ctx, cancel := r.Sources.WithTimeout(ctx)
	defer cancel()
	destroyed, err := sh.store.Sweep(ctx, sh.entry, *sh.read)
	if err != nil {
		return fmt.Errorf("destroy old versions of shared ring %s: %w", sh.status.Path, err)
	}
	if len(destroyed) > 0 {
		log.FromContext(ctx).Info("Destroyed shared ring versions holding keys no longer in the ring", "entry", sh.status.Path, "versions", destroyed)
	}
	r.memory.Swept(sh.status.Path, sh.read.Version)
	return nil
}
