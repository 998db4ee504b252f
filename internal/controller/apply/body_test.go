package apply

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/randfill"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// The status apply marshals the typed status as it is: its body must say
// exactly what an apply of the status converted to unstructured said (the
// converter the apply used before, and what the API's clients use), for
// every status kind, empty and filled, or the apply would set or remove
// fields it did not mean to.
func TestAppliedStatusIsTheUnstructuredOne(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status func() any
	}{
		{"TicketKeyRing", func() any { return &v1alpha1.TicketKeyRingStatus{} }},
		{"ECHKeyRing", func() any { return &v1alpha1.ECHKeyRingStatus{} }},
		{"CertificatePolicy", func() any { return &v1alpha1.CertificatePolicyStatus{} }},
		{"FleetRequest", func() any { return &v1alpha1.FleetRequestStatus{} }},
		{"ClusterKeySource", func() any { return &v1alpha1.ClusterKeySourceStatus{} }},
		{"ClusterDNSZone", func() any { return &v1alpha1.ClusterDNSZoneStatus{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fill := randfill.NewWithSeed(1).NilChance(0.3).NumElements(0, 3)
			for i := range 200 {
				st := tc.status()
				if i > 0 {
					fill.Fill(st)
				}
				viaConverter, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
				if err != nil {
					t.Fatal(err)
				}
				b, err := json.Marshal(st)
				if err != nil {
					t.Fatal(err)
				}
				var viaJSON map[string]any
				if err := json.Unmarshal(b, &viaJSON); err != nil {
					t.Fatal(err)
				}
				roundTrip, err := json.Marshal(viaConverter)
				if err != nil {
					t.Fatal(err)
				}
				var want map[string]any
				if err := json.Unmarshal(roundTrip, &want); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(viaJSON, want) {
					t.Fatalf("fill %d: the typed body\n%s\nis not the unstructured one\n%s", i, b, roundTrip)
				}
			}
		})
	}
}
