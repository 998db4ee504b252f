package shape

import (
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// A string interned stays one copy across garbage collections while it is
// held, and its entry goes once nothing holds it.
func TestIntern(t *testing.T) {
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	first := in(strings.Clone("shop"))
	runtime.GC()
	runtime.GC()
	if again := in(strings.Clone("shop")); !same(first, again) || again != "shop" {
		t.Fatal("a string held across a collection was copied anew")
	}
	if in("") != "" || in("shop-2") == first {
		t.Fatal("distinct strings share")
	}
	runtime.KeepAlive(first)
	name := strings.Repeat("x", 64) + time.Now().String()
	_ = in(strings.Clone(name))
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		interned.Lock()
		n := 0
		for _, b := range interned.buckets {
			for _, c := range b {
				if c.n == len(name) {
					n++
				}
			}
		}
		interned.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the entry of a string nothing holds stays")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
