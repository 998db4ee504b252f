package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

func TestParseRing(t *testing.T) {
	for _, tc := range []struct {
		arg     string
		want    ringRef
		wantErr string
	}{
		{arg: "web", want: ringRef{Namespace: "shop", Name: "web"}},
		{arg: "tkr/web", want: ringRef{Namespace: "shop", Name: "web"}},
		{arg: "ticketkeyrings.ringmaster.io/web", want: ringRef{Namespace: "shop", Name: "web"}},
		{arg: "ctkr/edge", want: ringRef{Cluster: true, Name: "edge"}},
		{arg: "ClusterTicketKeyRing/edge", want: ringRef{Cluster: true, Name: "edge"}},
		{arg: "ekr/web", want: ringRef{ECH: true, Namespace: "shop", Name: "web"}},
		{arg: "echkeyrings.ringmaster.io/web", want: ringRef{ECH: true, Namespace: "shop", Name: "web"}},
		{arg: "deploy/web", wantErr: `"deploy/web" is not a ring: want NAME, tkr/NAME or ctkr/NAME`},
		{arg: "tkr/", wantErr: `"tkr/" is not a ring`},
		{arg: "a/b/c", wantErr: `"a/b/c" is not a ring`},
	} {
		got, err := parseRing(tc.arg, "shop")
		if tc.wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want %q", tc.arg, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.arg, got, err, tc.want)
		}
	}
}

func TestLimit(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Hour: "1h", 90 * time.Minute: "1h30m", 3 * time.Minute: "3m", 30 * time.Second: "30s",
		90 * 24 * time.Hour: "90d", 36 * time.Hour: "36h", 0: "0s",
	} {
		if got := limit(d); got != want {
			t.Errorf("limit(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestTLSSecretListDecodesNoKey decodes a list as the API server sends it:
// tls.crt and cert-manager's annotations are kept, and neither tls.key nor
// an annotation holding it is decoded.
func TestTLSSecretListDecodesNoKey(t *testing.T) {
	const key = "S0VZLUJZVEVT"
	body := fmt.Sprintf(`{"kind":"SecretList","apiVersion":"v1","metadata":{"continue":"next"},"items":[{
		"metadata":{"name":"web-tls","namespace":"shop","labels":{"app":"web"},"annotations":{
			"cert-manager.io/certificate-name":"web",
			"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"tls.key\":\"%s\"}}",
			"other":{"nested":["%s"]}},
			"managedFields":[{"manager":"kubectl","fieldsV1":{"f:data":{"f:tls.key":{}}}}]},
		"type":"kubernetes.io/tls",
		"data":{"tls.crt":"Q0VSVA==","tls.key":"%s","ca.crt":"Q0E="}}]}`, key, key, key)
	var page tlsSecretList
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Metadata.Continue != "next" {
		t.Fatalf("page %+v", page)
	}
	s := page.Items[0]
	if string(s.Data.Cert) != "CERT" || s.Metadata.Name != "web-tls" || s.Metadata.Labels["app"] != "web" {
		t.Errorf("item %+v", s)
	}
	if len(s.Metadata.Annotations) != 1 || s.Metadata.Annotations["cert-manager.io/certificate-name"] != "web" {
		t.Errorf("annotations %v: want cert-manager's alone", s.Metadata.Annotations)
	}
	if dump := fmt.Sprintf("%#v", page); strings.Contains(dump, key) || strings.Contains(dump, "KEY-BYTES") {
		t.Errorf("the key was decoded: %s", dump)
	}
}

// TestHelp checks that every command documents itself with an example of
// kubectl ringmaster running it.
func TestHelp(t *testing.T) {
	var out bytes.Buffer
	root := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out})
	names := map[string]bool{}
	for _, c := range root.Commands() {
		if c.Name() == "completion" || c.Name() == "help" {
			continue
		}
		names[c.Name()] = true
		if c.Short == "" || c.Long == "" || !strings.Contains(c.Example, "kubectl ringmaster "+c.Name()) {
			t.Errorf("%s: short %q, example %q: want a description and an example running it", c.Name(), c.Short, c.Example)
		}
	}
	for _, want := range []string{"audit", "status", "rotate", "revoke", "probe"} {
		if !names[want] {
			t.Errorf("no command %s", want)
		}
	}
	out.Reset()
	if code := Main([]string{"--help"}, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out}); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	for _, want := range []string{"kubectl ringmaster [command]", "kubectl ringmaster audit -A", "kubectl ringmaster probe "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not say %q:\n%s", want, out.String())
		}
	}
}

func TestSharedLine(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	read := &metav1.Time{Time: now.Add(-3 * time.Second)}
	for _, tc := range []struct {
		name string
		sh   v1alpha1.SharedRingStatus
		want string
	}{
		{"written here", v1alpha1.SharedRingStatus{Path: "secret/r/namespaces/shop/web", Version: 7, Writer: "Local", LastSyncTime: read},
			"version 7 of Vault entry secret/r/namespaces/shop/web, written by this cluster; entry read 3s ago"},
		{"adopted", v1alpha1.SharedRingStatus{Path: "secret/r/cluster/edge", Version: 8, Writer: "Adopted",
			PropagationDelay: &metav1.Duration{Duration: 740 * time.Millisecond}, LastSyncTime: read},
			"version 8 of Vault entry secret/r/cluster/edge, written by another cluster and published here 740ms later; entry read 3s ago"},
		{"never read", v1alpha1.SharedRingStatus{Path: "secret/r/cluster/edge"}, "version 0 of Vault entry secret/r/cluster/edge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sharedLine(&tc.sh, now); got != tc.want {
				t.Errorf("sharedLine =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}
