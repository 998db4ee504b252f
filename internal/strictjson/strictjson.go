// Package strictjson holds what the ring file codecs (internal/keyring's
// ticketkeys.json, internal/echring's echkeys.json) need beyond
// encoding/json to read a hostile file safely: a walk that refuses what the
// decoder lets through silently, and descriptions of decoder errors that
// quote nothing of the input. Its messages name a place in the file
// ("keys[0]") and never a name or a value from it, for a file may hold
// key bytes anywhere. It imports only the standard library.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Shape is what Check expects at one place of a file: an object with
// exactly the named Fields, an array of elements of one shape (Elem), or,
// for a nil *Shape, a scalar.
type Shape struct {
	Fields map[string]*Shape
	Elem   *Shape
}

// Check refuses what encoding/json lets through silently: a field name
// matched regardless of case (including by Unicode folding: "\u212Aeys" is
// "keys" to it), a field given twice (it keeps the last), and an unknown
// field. It refuses malformed JSON and a container where another type
// belongs too, so that what the decoder then reports is a scalar of the
// wrong type, which Problem describes without quoting the input. Its
// errors name the place and never quote a name or a value from the file;
// the top is named top: each codec passes its own noun ("the ring" for
// ticketkeys.json, "the ECH ring" for echkeys.json).
//
// It walks the tokens once and holds one set of names per open object; it
// never descends deeper than s, so the nesting of hostile input costs it
// nothing.
func Check(data []byte, s *Shape, top string) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty")
	}
	w := walker{dec: json.NewDecoder(bytes.NewReader(data)), top: top}
	return w.walk(s, "")
}

type walker struct {
	dec *json.Decoder
	top string
}

// malformed reports a token the decoder could not read, by its offset: its
// own message may quote a character of the input.
func (w walker) malformed(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("unexpected end of input")
	}
	return fmt.Errorf("not valid JSON at byte %d", w.dec.InputOffset())
}

// place names path for a message: top at the top.
func (w walker) place(path string) string {
	if path == "" {
		return w.top
	}
	return path
}

func (w walker) walk(s *Shape, path string) error {
	tok, err := w.dec.Token()
	if err != nil {
		return w.malformed(err)
	}
	d, ok := tok.(json.Delim)
	switch {
	case !ok:
		return nil // a scalar or null: its type is the decoder's to check
	case d == '{' && s != nil && s.Fields != nil:
		if err := w.object(s, path); err != nil {
			return err
		}
	case d == '[' && s != nil && s.Elem != nil:
		for i := 0; w.dec.More(); i++ {
			if err := w.walk(s.Elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%s: an object or array where another type belongs", w.place(path))
	}
	if _, err := w.dec.Token(); err != nil { // the closing delimiter
		return w.malformed(err)
	}
	return nil
}

func (w walker) object(s *Shape, path string) error {
	seen := make(map[string]bool, len(s.Fields))
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return w.malformed(err)
		}
		name, _ := tok.(string)
		if seen[name] {
			// Only a known name gets this far twice: safe to print.
			return fmt.Errorf("%s: field %q given twice", w.place(path), name)
		}
		seen[name] = true
		sub, known := s.Fields[name]
		if !known {
			for want := range s.Fields {
				if strings.EqualFold(name, want) {
					return fmt.Errorf("%s: a field name in another case than %q: field names are case-sensitive", w.place(path), want)
				}
			}
			return fmt.Errorf("%s: unknown field", w.place(path))
		}
		at := name
		if path != "" {
			at = path + "." + name
		}
		if err := w.walk(sub, at); err != nil {
			return err
		}
	}
	return nil
}

// Problem describes an error of encoding/json's decoder without what its
// message may quote of the input: a number, a character, a field name.
// Check has refused malformed JSON and unknown fields before, so type
// errors are what is left. The top of the file is named top, and an error
// of no known kind is other ("not a ring").
func Problem(err error, top, other string) string {
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &typ):
		got, _, _ := strings.Cut(typ.Value, " ") // "number 1e99" quotes the number
		where := typ.Field
		if where == "" {
			where = top
		}
		if got == "number" && typ.Type != nil && typ.Type.Kind() >= reflect.Int && typ.Type.Kind() <= reflect.Uint64 {
			return fmt.Sprintf("%s: not an integer in range", where)
		}
		return fmt.Sprintf("%s: a JSON %s where %s belongs", where, got, kind(typ.Type))
	case errors.As(err, &syn):
		return fmt.Sprintf("not valid JSON at byte %d", syn.Offset)
	case errors.Is(err, io.EOF):
		return "empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected end of input"
	default:
		return other
	}
}

// kind names the JSON type that decodes into t.
func kind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	default:
		return "another type"
	}
}
