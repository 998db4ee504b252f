package echring

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// shape is what checkStrict expects at one place of echkeys.json: an
// object with exactly the named fields, an array of elements of one shape,
// or, for a nil *shape, a scalar.
type shape struct {
	fields map[string]*shape
	elem   *shape
}

// ringShape mirrors the json tags of fileRing and fileConfig;
// TestStrictShapeMatchesTags keeps them in step.
var ringShape = &shape{fields: map[string]*shape{
	"version":  nil,
	"ring":     nil,
	"epoch":    nil,
	"issuedAt": nil,
	"configs": {elem: &shape{fields: map[string]*shape{
		"id":          nil,
		"state":       nil,
		"config":      nil,
		"privateKey":  nil,
		"createdAt":   nil,
		"publishedAt": nil,
		"retiredAt":   nil,
		"expiresAt":   nil,
	}}},
}}

// checkStrict refuses what encoding/json lets through silently: a field
// name matched regardless of case (including by Unicode folding: "\u017Ftate"
// is "state" to it), a field given twice (it keeps the last), and an unknown
// field. It refuses malformed JSON and a container where another type
// belongs too, so that what the decoder then reports is a scalar of the
// wrong type, which it describes without quoting the input. Its errors name
// the place ("configs[0]") and never quote a name or a value from the file.
// It walks the tokens once and holds one set of names per open object; it
// never descends deeper than ringShape, so the nesting of hostile input
// costs it nothing.
func checkStrict(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return invalid("parse %s: empty", FileName)
	}
	return walk(json.NewDecoder(bytes.NewReader(data)), ringShape, "")
}

// malformed reports a token the decoder could not read, by its offset: its
// own message may quote a character of the input.
func malformed(dec *json.Decoder, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return invalid("parse %s: unexpected end of input", FileName)
	}
	return invalid("parse %s: not valid JSON at byte %d", FileName, dec.InputOffset())
}

// place names path for a message: "the ring" at the top.
func place(path string) string {
	if path == "" {
		return "the ring"
	}
	return path
}

func walk(dec *json.Decoder, s *shape, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return malformed(dec, err)
	}
	d, ok := tok.(json.Delim)
	switch {
	case !ok:
		return nil // a scalar or null: its type is the decoder's to check
	case d == '{' && s != nil && s.fields != nil:
		seen := make(map[string]bool, len(s.fields))
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return malformed(dec, err)
			}
			name, _ := tok.(string)
			if seen[name] {
				// Only a known name gets this far twice: safe to print.
				return invalid("parse %s: %s: field %q given twice", FileName, place(path), name)
			}
			seen[name] = true
			sub, known := s.fields[name]
			if !known {
				for want := range s.fields {
					if strings.EqualFold(name, want) {
						return invalid("parse %s: %s: a field name in another case than %q: field names are case-sensitive", FileName, place(path), want)
					}
				}
				return invalid("parse %s: %s: unknown field", FileName, place(path))
			}
			at := name
			if path != "" {
				at = path + "." + name
			}
			if err := walk(dec, sub, at); err != nil {
				return err
			}
		}
	case d == '[' && s != nil && s.elem != nil:
		for i := 0; dec.More(); i++ {
			if err := walk(dec, s.elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	default:
		return invalid("parse %s: %s: an object or array where another type belongs", FileName, place(path))
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return malformed(dec, err)
	}
	return nil
}
