package shape

import (
	"hash/maphash"
	"runtime"
	"strings"
	"sync"
	"unsafe"
	"weak"
)

// The caches hold tens of thousands of objects sharing a few dozen strings
// (namespaces, label keys, condition messages, owner UIDs), which each
// object decoded on its own would otherwise hold a copy of. in makes them
// one copy each, held weakly: a copy lives while a cached object refers to
// its bytes, and its entry goes with it.
//
// unique.Make does not do here: its entries live while their Handle does,
// not while the string's bytes do, so a string kept past its Handle (as a
// cache keeps it) is copied anew after the next garbage collection.
var interned = struct {
	sync.Mutex
	seed    maphash.Seed
	buckets map[uint64][]copyOf
}{seed: maphash.MakeSeed(), buckets: map[uint64][]copyOf{}}

// copyOf is one interned copy: its bytes, weakly, and its length.
type copyOf struct {
	bytes weak.Pointer[byte]
	n     int
}

// in is s's one copy.
func in(s string) string {
	if s == "" {
		return ""
	}
	h := maphash.String(interned.seed, s)
	interned.Lock()
	defer interned.Unlock()
	for _, c := range interned.buckets[h] {
		if c.n != len(s) {
			continue
		}
		if p := c.bytes.Value(); p != nil {
			if kept := unsafe.String(p, c.n); kept == s {
				return kept
			}
		}
	}
	kept := strings.Clone(s)
	p := unsafe.StringData(kept)
	interned.buckets[h] = append(interned.buckets[h], copyOf{bytes: weak.Make(p), n: len(kept)})
	runtime.AddCleanup(p, sweep, h)
	return kept
}

// sweep drops the entries of bucket h whose copies are gone.
func sweep(h uint64) {
	interned.Lock()
	defer interned.Unlock()
	kept := interned.buckets[h][:0]
	for _, c := range interned.buckets[h] {
		if c.bytes.Value() != nil {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 {
		delete(interned.buckets, h)
		return
	}
	interned.buckets[h] = kept
}
