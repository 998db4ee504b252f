package echring

import "github.com/ringmaster-io/ringmaster/internal/strictjson"

// ringShape mirrors the json tags of fileRing and fileConfig;
// TestStrictShapeMatchesTags keeps them in step.
var ringShape = &strictjson.Shape{Fields: map[string]*strictjson.Shape{
	"version":  nil,
	"ring":     nil,
	"epoch":    nil,
	"issuedAt": nil,
	"configs": {Elem: &strictjson.Shape{Fields: map[string]*strictjson.Shape{
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

// ringNoun names the top of echkeys.json in errors: "the ECH ring", never
// words of the ticket ring's file, whose checks strictjson shares.
const ringNoun = "the ECH ring"

// checkStrict refuses, with strictjson.Check, what encoding/json lets
// through silently (fields matched regardless of case, given twice, or
// unknown; a container where a scalar belongs), naming the place in
// echkeys.json and never quoting the file.
func checkStrict(data []byte) error {
	if err := strictjson.Check(data, ringShape, ringNoun); err != nil {
		return invalid("parse %s: %s", FileName, err)
	}
	return nil
}
