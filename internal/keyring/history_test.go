package keyring_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

func TestHistory(t *testing.T) {
	// Three epochs of the std ring, an hour apart: e1 at t0-2h, e2 at t0-1h,
	// e3 at t0. Each mints one key; key ids are those of ringOf.
	e1 := ringOf(std, 1, at(-2*hour), at(-hour), at(-2*hour))
	e2 := ringOf(std, 2, at(-hour), t0, at(-hour), at(-2*hour))
	e3 := ringOf(std, 3, t0, at(hour), t0, at(-hour), at(-2*hour))
	bad := errors.New("snapshot shop/web-e2: not JSON")

	tests := []struct {
		name    string
		records []keyring.Record
		wantErr error
		// what the history tells
		wantCurrent int64 // epoch of Current()
		wantSince   map[string]time.Duration
		wantUnknown []string
		wantHandled map[string]bool
		// Stale(next) for a ring next of epoch 4 that dropped the key e1
		// minted first, and holds every other.
		wantStale []int64
	}{
		{
			name:        "nothing published",
			wantCurrent: 0,
			wantUnknown: []string{idAt(0)},
			wantHandled: map[string]bool{"r1": false},
		},
		{
			name:        "three epochs, in any order: a key's first publication is the earliest epoch holding it",
			records:     []keyring.Record{{Epoch: 2, Ring: e2}, {Epoch: 3, Ring: e3, RotateRequest: "r1"}, {Epoch: 1, Ring: e1}},
			wantCurrent: 3,
			wantSince:   map[string]time.Duration{idAt(-2 * hour): -2 * hour, idAt(-hour): -2 * hour, idAt(0): -hour, idAt(hour): 0},
			wantUnknown: []string{idAt(2 * hour)},
			wantHandled: map[string]bool{"r1": true, "r2": false, "": false},
			wantStale:   []int64{3, 2, 1}, // each holds the dropped key; newest first
		},
		{
			name:        "an older record unreadable only loses its history, and is stale",
			records:     []keyring.Record{{Epoch: 3, Ring: e3}, {Epoch: 2, Err: bad, RotateRequest: "r2"}},
			wantCurrent: 3,
			wantSince:   map[string]time.Duration{idAt(-2 * hour): 0, idAt(-hour): 0, idAt(0): 0, idAt(hour): 0},
			wantHandled: map[string]bool{"r2": true},
			wantStale:   []int64{3, 2},
		},
		{
			name:    "the newest record unreadable: the current state is unknown",
			records: []keyring.Record{{Epoch: 1, Ring: e1}, {Epoch: 2, Err: bad}},
			wantErr: bad,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := keyring.NewHistory(tc.records)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("NewHistory error = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got := h.Current().Epoch; got != tc.wantCurrent {
				t.Errorf("Current().Epoch = %d, want %d", got, tc.wantCurrent)
			}
			for id, d := range tc.wantSince {
				if got, ok := h.StagedSince(id); !ok || !got.Equal(at(d)) {
					t.Errorf("StagedSince(%s) = %v, %v; want t0%+v", id, got, ok, d)
				}
			}
			for _, id := range tc.wantUnknown {
				if got, ok := h.StagedSince(id); ok {
					t.Errorf("StagedSince(%s) = %v, want unknown", id, got)
				}
			}
			for req, want := range tc.wantHandled {
				if got := h.Handled(req); got != want {
					t.Errorf("Handled(%q) = %v, want %v", req, got, want)
				}
				// A request is carried out once: not when on record, nor
				// when the status echoes it, nor when empty.
				if got := h.CarryOut(req, ""); got != (req != "" && !want) {
					t.Errorf("CarryOut(%q, \"\") = %v", req, got)
				}
				if h.CarryOut(req, req) {
					t.Errorf("CarryOut(%q) of the request the status echoes", req)
				}
			}
			next := keyring.Ring{Epoch: 4, Keys: slices.DeleteFunc(slices.Clone(e3.Keys), func(k keyring.Key) bool { return k.ID == idAt(-2*hour) })}
			if got := h.Stale(next); !slices.Equal(got, tc.wantStale) {
				t.Errorf("Stale = %v, want %v", got, tc.wantStale)
			}
		})
	}
}

func TestStaleKeepsSnapshotsOfLiveKeysAndNewerEpochs(t *testing.T) {
	e1 := ringOf(std, 1, at(-hour), t0, at(-hour))
	e2 := ringOf(std, 2, t0, at(hour), t0, at(-hour))
	h, err := keyring.NewHistory([]keyring.Record{{Epoch: 1, Ring: e1}, {Epoch: 2, Ring: e2}})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Stale(e2); len(got) != 0 {
		t.Errorf("Stale(newest) = %v: every key of e1 is still in e2, and e2 is the newest", got)
	}
	if got := h.Stale(keyring.Ring{Epoch: 1}); len(got) != 0 {
		t.Errorf("Stale of an older epoch = %v: snapshots at or above it are never stale", got)
	}
}

func TestNextEpoch(t *testing.T) {
	tests := []struct {
		current, published, want int64
	}{
		{0, 0, 1}, // a new ring
		{7, 7, 8}, // the usual step
		{0, 7, 8}, // every snapshot deleted: the epoch never goes back
		{7, 3, 8}, // a status that lags the snapshots
	}
	for _, tc := range tests {
		if got := keyring.NextEpoch(keyring.Ring{Epoch: tc.current}, tc.published); got != tc.want {
			t.Errorf("NextEpoch(current %d, published %d) = %d, want %d", tc.current, tc.published, got, tc.want)
		}
	}
}

func TestOverdue(t *testing.T) {
	steady := steadyRing() // staged key S activates at t0+1h
	tests := []struct {
		name      string
		ring      keyring.Ring
		now       time.Time
		wantSince time.Duration
		wantOK    bool
	}{
		{"a staged key waits: nothing is due", steady, at(hour - second), 0, false},
		{"the staged key activated: its successor is due since then", steady, at(hour), hour, true},
		{"long overdue", steady, at(3 * hour), hour, true},
		{"a ring never published has nothing to rotate", keyring.Ring{}, t0, 0, false},
		{"a ring published without keys: due since it was", keyring.Ring{Name: steady.Name, Epoch: 9, IssuedAt: at(2 * hour)}, at(3 * hour), 2 * hour, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			since, ok := keyring.Overdue(tc.ring, tc.now)
			if ok != tc.wantOK || (ok && !since.Equal(at(tc.wantSince))) {
				t.Errorf("Overdue = %v, %v; want t0%+v, %v", since, ok, tc.wantSince, tc.wantOK)
			}
		})
	}
}
