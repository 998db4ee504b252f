package written_test

import (
	"sync"
	"testing"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/written"
)

func TestMemory(t *testing.T) {
	var m written.Shared
	if m.Adopted("kv/a") != nil || !m.Unswept("kv/a", 1) {
		t.Fatal("an empty memory remembers something")
	}
	var wg sync.WaitGroup
	for v := range int64(50) {
		wg.Go(func() {
			m.Adopt("kv/a", v1alpha1.SharedRingStatus{Version: 7})
			m.Swept("kv/a", v)
		})
	}
	wg.Wait()
	if got := m.Adopted("kv/a"); got == nil || got.Version != 7 {
		t.Fatalf("Adopted = %+v, want version 7", got)
	}
	for _, tc := range []struct {
		version int64
		unswept bool
	}{{48, false}, {49, false}, {50, true}} {
		if got := m.Unswept("kv/a", tc.version); got != tc.unswept {
			t.Errorf("Unswept(%d) = %v, want %v: the newest swept is 49, whatever the order", tc.version, got, tc.unswept)
		}
	}
	m.Swept("kv/a", 3)
	if !m.Unswept("kv/a", 50) || m.Unswept("kv/a", 49) {
		t.Error("an older sweep went back on a newer one")
	}
	if m.Adopted("kv/b") != nil || !m.Unswept("kv/b", 1) {
		t.Error("one entry's memory leaks into another's")
	}
}
