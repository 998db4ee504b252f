package mint

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
)

// A ring's Vault source, and so its token, lives as long as the ring and its
// settings: reused across reconciles, replaced when either changes, dropped
// when the ring is deleted.
func TestSourcesKeepOneVaultSourcePerRing(t *testing.T) {
	ctx := context.Background()
	ring := func(uid, addr string) *v1alpha1.TicketKeyRing {
		return &v1alpha1.TicketKeyRing{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID(uid)},
			Spec: v1alpha1.TicketKeyRingSpec{Source: v1alpha1.KeySource{Vault: &v1alpha1.VaultSource{
				Address: addr, Auth: v1alpha1.VaultAuth{TokenSecretRef: &v1alpha1.KeyRef{Name: "t", Key: "token"}},
			}}},
		}
	}
	var s Sources
	get := func(r *v1alpha1.TicketKeyRing) Source {
		t.Helper()
		src, err := s.For(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := src.(*Vault); !ok {
			t.Fatalf("source %T, want *Vault", src)
		}
		return src
	}

	first := get(ring("1", "http://127.0.0.1:8200"))
	if get(ring("1", "http://127.0.0.1:8200")) != first {
		t.Error("a second reconcile of the same ring got a new source (and would log in again)")
	}
	moved := get(ring("1", "http://127.0.0.1:8201"))
	if moved == first {
		t.Error("a changed address kept the old source")
	}
	if get(ring("2", "http://127.0.0.1:8201")) == moved {
		t.Error("a ring created again under the same name kept the deleted ring's source")
	}
	s.Forget(types.NamespacedName{Namespace: "shop", Name: "web"})
	if len(s.vault) != 0 {
		t.Errorf("Forget left %d sources", len(s.vault))
	}

	if src, err := s.For(ctx, &v1alpha1.TicketKeyRing{}); err != nil || src != (Random{}) {
		t.Errorf("a ring without a source got %T, %v; want Random", src, err)
	}
}
