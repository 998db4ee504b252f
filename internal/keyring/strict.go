package keyring

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// shape is what checkStrict expects at one place of ticketkeys.json: an
// object with exactly the named fields, an array of elements of one shape,
// or, for a nil *shape, a scalar.
type shape struct {
	fields map[string]*shape
	elem   *shape
}

// ringShape mirrors the json tags of fileRing and fileKey;
// TestStrictShapeMatchesTags keeps them in step.
var ringShape = &shape{fields: map[string]*shape{
	"version":  nil,
	"ring":     nil,
	"epoch":    nil,
	"issuedAt": nil,
	"keys": {elem: &shape{fields: map[string]*shape{
		"id":         nil,
		"activeFrom": nil,
		"retireAt":   nil,
		"expiresAt":  nil,
		"secret":     nil,
	}}},
}}

// errMalformed stops checkStrict where the input is not JSON or not of the
// expected types; the decoder that runs next reports that with its own
// message.
var errMalformed = errors.New("malformed")

// checkStrict refuses what encoding/json lets through silently: a field
// name matched regardless of case (including by Unicode folding: "\u212Aeys"
// is "keys" to it), a field given twice (it keeps the last), and an unknown
// field (refused here too, with its name cut short, since the decoder would
// quote it whole). It walks the tokens once and holds one set of names per
// open object; it never descends deeper than ringShape, so the nesting of
// hostile input costs it nothing.
func checkStrict(data []byte) error {
	return walk(json.NewDecoder(bytes.NewReader(data)), ringShape)
}

func walk(dec *json.Decoder, s *shape) error {
	tok, err := dec.Token()
	if err != nil {
		return errMalformed
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
				return errMalformed
			}
			name, _ := tok.(string)
			if seen[name] {
				return invalid("parse %s: field %s given twice", FileName, clip(name))
			}
			seen[name] = true
			sub, known := s.fields[name]
			if !known {
				for want := range s.fields {
					if strings.EqualFold(name, want) {
						return invalid("parse %s: field %s: field names are case-sensitive, want %q", FileName, clip(name), want)
					}
				}
				return invalid("parse %s: unknown field %s", FileName, clip(name))
			}
			if err := walk(dec, sub); err != nil {
				return err
			}
		}
	case d == '[' && s != nil && s.elem != nil:
		for dec.More() {
			if err := walk(dec, s.elem); err != nil {
				return err
			}
		}
	default:
		return errMalformed // a container where another type belongs
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return errMalformed
	}
	return nil
}
