package keyring

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestStrictShapeMatchesTags keeps checkStrict's ringShape in step with the
// json tags of the types Decode fills: a field added to one and not to the
// other would be refused, or let through in any case.
func TestStrictShapeMatchesTags(t *testing.T) {
	tags := func(typ reflect.Type) []string {
		var names []string
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			names = append(names, name)
		}
		slices.Sort(names)
		return names
	}
	if got, want := slices.Sorted(maps.Keys(ringShape.Fields)), tags(reflect.TypeFor[fileRing]()); !slices.Equal(got, want) {
		t.Errorf("ring fields %v, json tags of fileRing %v", got, want)
	}
	keys := ringShape.Fields["keys"]
	if keys == nil || keys.Elem == nil {
		t.Fatal(`ringShape has no array of objects for "keys"`)
	}
	if got, want := slices.Sorted(maps.Keys(keys.Elem.Fields)), tags(reflect.TypeFor[fileKey]()); !slices.Equal(got, want) {
		t.Errorf("key fields %v, json tags of fileKey %v", got, want)
	}
}

// TestCheckStrictDepth: deep nesting, where the shape expects a scalar,
// stops the walk at once instead of descending.
func TestCheckStrictDepth(t *testing.T) {
	deep := `{"ring": ` + strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20) + `}`
	if err := checkStrict([]byte(deep)); !errors.Is(err, ErrInvalidRing) || !strings.Contains(err.Error(), "ring: an object or array where another type belongs") {
		t.Errorf("checkStrict = %v, want a container where the ring name belongs", err)
	}
	if _, err := Decode([]byte(deep)); err == nil {
		t.Error("Decode accepted deep nesting")
	}
}
