package keyring

import (
	"cmp"
	"slices"
	"time"
)

// Record is one published epoch as read back from its snapshot: the record
// a ring is recovered from.
type Record struct {
	// Epoch is the epoch the snapshot is labelled with.
	Epoch int64
	// Ring is the ring it holds; zero when Err is set.
	Ring Ring
	// Err says why the snapshot cannot be read.
	Err error
	// RotateRequest is the rotate-now request the epoch carried out, if any.
	RotateRequest string
	// RevokeRequest is the revoke the epoch carried out, if any.
	RevokeRequest string
	// FleetRequest is the UID of the FleetRequest the epoch carried out,
	// if any.
	FleetRequest string
}

// History is what a ring's snapshots tell: its current state, when each key
// was first published, and which rotate-now requests were carried out.
type History struct {
	records []Record // newest first
	first   map[string]time.Time
}

// NewHistory reads records in any order. It fails when the newest record is
// unreadable, for the ring's current state is then unknown; an older one
// unreadable only loses some history.
func NewHistory(records []Record) (History, error) {
	h := History{records: slices.Clone(records), first: map[string]time.Time{}}
	slices.SortFunc(h.records, func(a, b Record) int { return cmp.Compare(b.Epoch, a.Epoch) })
	if len(h.records) > 0 && h.records[0].Err != nil {
		return History{}, h.records[0].Err
	}
	for _, r := range h.records {
		if r.Err != nil {
			continue
		}
		for _, k := range r.Ring.Keys {
			if t, ok := h.first[k.ID]; !ok || r.Ring.IssuedAt.Before(t) {
				h.first[k.ID] = r.Ring.IssuedAt
			}
		}
	}
	return h, nil
}

// Current is the newest ring, or the zero Ring when nothing was published.
func (h History) Current() Ring {
	if len(h.records) == 0 {
		return Ring{}
	}
	return h.records[0].Ring
}

// StagedSince reports when a key was first published: the start of its
// time as a staged key. It is Next's stagedSince.
func (h History) StagedSince(id string) (time.Time, bool) {
	t, ok := h.first[id]
	return t, ok
}

// Handled reports whether an epoch carried out the rotate-now request, so
// that a request is carried out once even when the ring's status lags.
func (h History) Handled(request string) bool {
	return request != "" && slices.ContainsFunc(h.records, func(r Record) bool { return r.RotateRequest == request })
}

// Revoked reports whether an epoch carried out the revoke request.
func (h History) Revoked(request string) bool {
	return request != "" && slices.ContainsFunc(h.records, func(r Record) bool { return r.RevokeRequest == request })
}

// Fleet reports the epoch on record that carried out the FleetRequest of
// uid, and when it was issued.
func (h History) Fleet(uid string) (int64, time.Time, bool) {
	if uid == "" {
		return 0, time.Time{}, false
	}
	for _, r := range h.records {
		if r.FleetRequest == uid && r.Err == nil {
			return r.Epoch, r.Ring.IssuedAt, true
		}
	}
	return 0, time.Time{}, false
}

// CarryOut reports whether a rotate-now request is to be carried out now:
// it is set, it is not the one the ring's status echoes as carried out, and
// no epoch on record carried it out (the status may lag the record).
func (h History) CarryOut(request, echoed string) bool {
	return request != "" && request != echoed && !h.Handled(request)
}

// CarryOutRevoke is CarryOut for a revoke request.
func (h History) CarryOutRevoke(request, echoed string) bool {
	return request != "" && request != echoed && !h.Revoked(request)
}

// Stale lists, newest first, the epochs older than next whose snapshot must
// be deleted: those holding a key next no longer has, that is an expired
// key (forward secrecy needs the bytes gone, not only unused), and those
// unreadable.
func (h History) Stale(next Ring) []int64 {
	var out []int64
	for _, r := range h.records {
		if r.Epoch >= next.Epoch {
			continue
		}
		if r.Err != nil || slices.ContainsFunc(r.Ring.Keys, func(k Key) bool { _, ok := next.Key(k.ID); return !ok }) {
			out = append(out, r.Epoch)
		}
	}
	return out
}

// NextEpoch is the epoch of the ring published after current. It never goes
// back below an epoch published before (lastPublished, from the ring's
// status), even when every snapshot was deleted: readers refuse an epoch
// lower than one they hold.
func NextEpoch(current Ring, lastPublished int64) int64 {
	return max(current.Epoch, lastPublished) + 1
}

// Overdue reports since when a rotation has been due that cannot be minted:
// the newest key has activated and no successor is staged behind it, or the
// ring was published without keys (every key expired while none could be
// minted; the times of the keys are gone with them, so since is when that
// ring was published). ok is false when nothing is due.
func Overdue(current Ring, now time.Time) (since time.Time, ok bool) {
	if len(current.Keys) == 0 && current.Epoch > 0 {
		return current.IssuedAt, true
	}
	if len(current.Keys) == 0 || now.Before(current.Keys[0].ActiveFrom) {
		return time.Time{}, false
	}
	return current.Keys[0].ActiveFrom, true
}
