package keyring

import "github.com/ringmaster-io/ringmaster/internal/strictjson"

// ringShape mirrors the json tags of fileRing and fileKey;
// TestStrictShapeMatchesTags keeps them in step.
var ringShape = &strictjson.Shape{Fields: map[string]*strictjson.Shape{
	"version":  nil,
	"ring":     nil,
	"epoch":    nil,
	"issuedAt": nil,
	"keys": {Elem: &strictjson.Shape{Fields: map[string]*strictjson.Shape{
		"id":         nil,
		"activeFrom": nil,
		"retireAt":   nil,
		"expiresAt":  nil,
		"secret":     nil,
	}}},
}}

// checkStrict refuses, with strictjson.Check, what encoding/json lets
// through silently (fields matched regardless of case, given twice, or
// unknown; a container where a scalar belongs), naming the place in
// ticketkeys.json and never quoting the file.
func checkStrict(data []byte) error {
	if err := strictjson.Check(data, ringShape, "the ring"); err != nil {
		return invalid("parse %s: %s", FileName, err)
	}
	return nil
}
