package ticketkeys

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
)

// IngressNginxKey is ingress-nginx's ConfigMap key holding the session
// ticket key: base64 of 48 or 80 bytes (openssl rand 80 | openssl enc -A
// -base64).
const IngressNginxKey = "ssl-session-ticket-key"

// haproxyTicketKeys finds the file of a tls-ticket-keys bind option in an
// haproxy.cfg, outside comments.
var haproxyTicketKeys = regexp.MustCompile(`(?m)^[^#\n]*\btls-ticket-keys[ \t]+([^ \t\r\n#]+)`)

// scanData reads a ConfigMap's or Secret's entries.
func scanData(s *Summary, o Object) {
	names := slices.Sorted(maps.Keys(o.Data))
	claimed := map[string]bool{}
	s.entries = map[string]entry{}
	for _, name := range names {
		if len(s.entries) == MaxFindings {
			break
		}
		if ks, ok := ParseKeys(o.Data[name]); ok {
			t, from, manager := since(o, dataPaths(name)...)
			s.entries[name] = entry{KeySet: ks, Since: t, SinceFrom: from, Manager: manager}
		}
	}

	if v, ok := o.Data[IngressNginxKey]; ok && o.Kind == KindConfigMap {
		claimed[IngressNginxKey] = true
		f := Finding{Field: field(IngressNginxKey), Shape: ShapeIngressNginx}
		if ks, ok := ParseKeys(v); ok {
			f.setKeys(ks)
			if ks.Keys > 1 {
				f.Problem = "ingress-nginx reads one key from ssl-session-ticket-key"
			}
		} else {
			f.Keys, f.Fingerprints = 1, []string{Fingerprint(v)}
			f.Problem = "not base64 of 48 or 80 bytes: ingress-nginx refuses it"
		}
		s.addEntry(o, f, IngressNginxKey)
	}

	for _, name := range names {
		if len(o.Data[name]) > maxEntryBytes {
			continue
		}
		for _, m := range haproxyTicketKeys.FindAllSubmatch(o.Data[name], MaxFindings) {
			file := string(m[1])
			base := path.Base(file)
			v, ok := o.Data[base]
			if !ok || base == name {
				s.References = append(s.References, Reference{ObjectRef: o.Ref(), Field: field(name), Shape: ShapeHAProxy, Path: file})
				continue
			}
			usedBy := o.Ref().String() + " " + field(name)
			if claimed[base] {
				for i := range s.Findings {
					if s.Findings[i].Field == field(base) {
						s.Findings[i].UsedBy = appendNew(s.Findings[i].UsedBy, usedBy)
					}
				}
				continue
			}
			claimed[base] = true
			f := Finding{Field: field(base), Shape: ShapeHAProxy, UsedBy: []string{usedBy}}
			if ks, ok := ParseKeys(v); ok {
				f.setKeys(ks)
				f.Problem = haproxyProblem(ks)
			} else {
				f.Problem = fmt.Sprintf("%s is not HAProxy's tls-ticket-keys format (base64 keys of 48 or 80 bytes, one a line)", file)
			}
			s.addEntry(o, f, base)
		}
	}

	for _, name := range names {
		e, ok := s.entries[name]
		if claimed[name] || !ok || !strings.Contains(strings.ToLower(name), "ticket") {
			continue
		}
		f := Finding{Field: field(name), Shape: ShapeKeyFile}
		f.setKeys(e.KeySet)
		s.addEntry(o, f, name)
	}
}

// haproxyProblem says what HAProxy makes of a key file: it needs keys of
// one size, and uses the last 3 lines.
func haproxyProblem(ks KeySet) string {
	switch {
	case ks.Size == 0:
		return "keys of mixed sizes: HAProxy refuses the file"
	case ks.Keys < 3:
		return fmt.Sprintf("%d key(s): HAProxy needs at least 3", ks.Keys)
	}
	return ""
}

// addEntry adds a finding of a data entry, dated by the entry's owner.
func (s *Summary) addEntry(o Object, f Finding, name string) {
	s.add(o, f, dataPaths(name)...)
	if e, ok := s.entries[name]; ok {
		e.Found = true
		s.entries[name] = e
	}
}

// dataPaths are the fieldsV1 paths of a data entry: a Secret's data, a
// ConfigMap's data or binaryData.
func dataPaths(name string) [][]string {
	return [][]string{{"f:data", "f:" + name}, {"f:binaryData", "f:" + name}}
}

// field names a data entry.
func field(name string) string { return "data[" + name + "]" }

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}
