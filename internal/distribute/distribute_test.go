package distribute

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func testRing() keyring.Ring {
	plan := keyring.Next(t0, keyring.Policy{RotationInterval: time.Hour, RetainedKeys: 2, ActivationDelay: time.Minute},
		keyring.Ring{Name: "shop/web"}, false, nil)
	r, err := plan.Fill([]keyring.Secret{sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))})
	if err != nil {
		panic(err)
	}
	return r
}

func testOwner(formats ...v1alpha1.KeyFormat) *v1alpha1.TicketKeyRing {
	return &v1alpha1.TicketKeyRing{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-1"},
		Spec:       v1alpha1.TicketKeyRingSpec{Distribution: v1alpha1.Distribution{Formats: formats}},
	}
}

func TestSnapshot(t *testing.T) {
	tests := []struct {
		name    string
		formats []v1alpha1.KeyFormat
		files   []string
	}{
		{"go only", []v1alpha1.KeyFormat{"go"}, []string{"ticketkeys.json"}},
		{"nginx and haproxy", []v1alpha1.KeyFormat{"go", "nginx", "haproxy"},
			[]string{"ticketkeys.json", "nginx.0.key", "nginx.1.key", "haproxy.keys"}},
		{"envoy", []v1alpha1.KeyFormat{"envoy"}, []string{"ticketkeys.json", "envoy.0.key", "envoy.1.key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			owner := testOwner(tt.formats...)
			s, err := Snapshot(owner, testRing())
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != "web-e1" || s.Namespace != "shop" {
				t.Errorf("snapshot %s/%s, want shop/web-e1", s.Namespace, s.Name)
			}
			if s.Immutable == nil || !*s.Immutable {
				t.Error("snapshot is not immutable")
			}
			if !metav1.IsControlledBy(s, owner) {
				t.Error("snapshot is not controlled by its ring")
			}
			if s.Labels[v1alpha1.RingLabel] != "web" || s.Labels[v1alpha1.EpochLabel] != "1" || s.Labels[v1alpha1.ComponentLabel] != "snapshot" {
				t.Errorf("labels = %v", s.Labels)
			}
			if len(s.Data) != len(tt.files) {
				t.Errorf("files = %d, want %v", len(s.Data), tt.files)
			}
			for _, f := range tt.files {
				if len(s.Data[f]) == 0 {
					t.Errorf("file %s missing", f)
				}
			}
			got, err := ReadSnapshot(s)
			if err != nil {
				t.Fatal(err)
			}
			if got.Epoch != 1 || len(got.Keys) != 2 || got.Keys[0].ID != testRing().Keys[0].ID {
				t.Errorf("ReadSnapshot = epoch %d, %d keys", got.Epoch, len(got.Keys))
			}
		})
	}
}

func TestProjection(t *testing.T) {
	owner := testOwner("go")
	snap, err := Snapshot(owner, testRing())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ns    string
		owned bool
	}{
		{"shop", true},     // owner references work within a namespace
		{"shop-eu", false}, // and nowhere else: found by labels instead
	}
	for _, tt := range tests {
		t.Run(tt.ns, func(t *testing.T) {
			p := Projection(owner, snap, tt.ns)
			if p.Name != "web-ticket-keys" || p.Namespace != tt.ns {
				t.Errorf("projection %s/%s", p.Namespace, p.Name)
			}
			if metav1.IsControlledBy(p, owner) != tt.owned {
				t.Errorf("controlled by ring = %v, want %v", !tt.owned, tt.owned)
			}
			if p.Immutable != nil {
				t.Error("a projection must stay mutable: pods follow it")
			}
			if p.Labels[v1alpha1.RingNamespaceLabel] != "shop" || p.Annotations[v1alpha1.EpochAnnotation] != "1" {
				t.Errorf("labels %v annotations %v", p.Labels, p.Annotations)
			}
			if !InSync(p, Projection(owner, snap, tt.ns)) {
				t.Error("a projection is not in sync with itself")
			}
		})
	}
	p := Projection(owner, snap, "shop")
	p.Data[keyring.FileName][0] ^= 1
	if InSync(p, Projection(owner, snap, "shop")) {
		t.Error("a hand-edited projection reads as in sync")
	}
	if string(snap.Data[keyring.FileName]) == string(p.Data[keyring.FileName]) {
		t.Error("the projection shares its data map with the snapshot")
	}
}

func TestReadSnapshotRefusesTampering(t *testing.T) {
	snap, err := Snapshot(testOwner("go"), testRing())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(*corev1.Secret)
		want   string
	}{
		{"relabelled epoch", func(s *corev1.Secret) { s.Labels[v1alpha1.EpochLabel] = "7" }, `labelled epoch "7"`},
		{"corrupt ring file", func(s *corev1.Secret) { s.Data[keyring.FileName] = []byte(`{"version":1,`) }, "parse ticketkeys.json"},
		{"missing ring file", func(s *corev1.Secret) { delete(s.Data, keyring.FileName) }, "parse ticketkeys.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := snap.DeepCopy()
			tt.mutate(s)
			_, err := ReadSnapshot(s)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "shop/web-e1") {
				t.Fatalf("ReadSnapshot error = %v, want one naming shop/web-e1 and %q", err, tt.want)
			}
			if tt.name != "relabelled epoch" && !errors.Is(err, keyring.ErrInvalidRing) {
				t.Errorf("error does not wrap ErrInvalidRing: %v", err)
			}
		})
	}
	if got := SnapshotEpoch(&corev1.Secret{}); got != 0 {
		t.Errorf("SnapshotEpoch of an unlabelled Secret = %d, want 0", got)
	}
}
