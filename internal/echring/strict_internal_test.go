package echring

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestStrictShapeMatchesTags keeps checkStrict's ringShape in step with the
// json tags of the types Decode fills.
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
	cs := ringShape.Fields["configs"]
	if cs == nil || cs.Elem == nil {
		t.Fatal(`ringShape has no array of objects for "configs"`)
	}
	if got, want := slices.Sorted(maps.Keys(cs.Elem.Fields)), tags(reflect.TypeFor[fileConfig]()); !slices.Equal(got, want) {
		t.Errorf("config fields %v, json tags of fileConfig %v", got, want)
	}
}

// TestCheckStrictDepth: deep nesting where a scalar belongs stops the walk
// at once.
func TestCheckStrictDepth(t *testing.T) {
	deep := `{"ring": ` + strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20) + `}`
	if err := checkStrict([]byte(deep)); !errors.Is(err, ErrInvalidRing) || !strings.Contains(err.Error(), "ring: an object or array where another type belongs") {
		t.Errorf("checkStrict = %v, want a container where the ring name belongs", err)
	}
}

// TestCheckStrictFolding: "\u017ftate" is "state" to encoding/json.
func TestCheckStrictFolding(t *testing.T) {
	err := checkStrict([]byte(`{"configs":[{"\u017ftate":"staged"}]}`))
	if !errors.Is(err, ErrInvalidRing) || !strings.Contains(err.Error(), `configs[0]: a field name in another case than "state"`) {
		t.Errorf("checkStrict = %v", err)
	}
}
