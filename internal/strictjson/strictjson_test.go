package strictjson_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ringmaster-io/ringmaster/internal/strictjson"
)

var shape = &strictjson.Shape{Fields: map[string]*strictjson.Shape{
	"name": nil,
	"items": {Elem: &strictjson.Shape{Fields: map[string]*strictjson.Shape{
		"id": nil,
	}}},
}}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string // want "" means accepted
	}{
		{"valid", `{"name":"a","items":[{"id":1},{"id":2}]}`, ""},
		{"empty", "  ", "empty"},
		{"truncated", `{"name":"a"`, "unexpected end of input"},
		{"not JSON", `{"name" 1}`, "not valid JSON at byte"},
		{"unknown field", `{"secretbytes":"x"}`, "the file: unknown field"},
		{"case-folded field", `{"NAME":"a"}`, `the file: a field name in another case than "name"`},
		{"Unicode-folded field", `{"items":[{"\u0130d":1}]}`, "items[0]: unknown field"},
		{"given twice", `{"name":"a","name":"b"}`, `the file: field "name" given twice`},
		{"container for a scalar", `{"name":[1]}`, "name: an object or array where another type belongs"},
		{"nested place", `{"items":[{"id":1},{"id":1,"x":2}]}`, "items[1]: unknown field"},
		{"deep nesting stops at once", `{"name":` + strings.Repeat("[", 1<<16) + strings.Repeat("]", 1<<16) + `}`, "name: an object or array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := strictjson.Check([]byte(tc.in), shape, "the file")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check = %v, want accepted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check = %v, want %q", err, tc.want)
			case err != nil && (strings.Contains(err.Error(), "secretbytes") || strings.Contains(err.Error(), "NAME")):
				t.Fatalf("Check quotes the input: %v", err)
			}
		})
	}
}

func TestProblem(t *testing.T) {
	type file struct {
		Name string `json:"name"`
		ID   uint8  `json:"id"`
		N    int64  `json:"n"`
	}
	for _, tc := range []struct{ in, want string }{
		{`{"name":12345}`, "name: a JSON number where a string belongs"},
		{`{"id":300}`, "id: not an integer in range"},
		{`{"n":1e99}`, "n: not an integer in range"},
		{`{"name":"a","id":"x"}`, "id: a JSON string where an integer belongs"},
		{`[1]`, "the file: a JSON array where an object belongs"},
	} {
		var f file
		err := json.Unmarshal([]byte(tc.in), &f)
		if got := strictjson.Problem(err, "the file", "not a file"); got != tc.want {
			t.Errorf("Problem(%s) = %q, want %q", tc.in, got, tc.want)
		}
		if got := strictjson.Problem(err, "the file", ""); strings.Contains(got, "12345") || strings.Contains(got, "1e99") {
			t.Errorf("Problem quotes the input: %q", got)
		}
	}
}
