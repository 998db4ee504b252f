package distribute

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

const home = "ringmaster-system"

func echOwner() Owner {
	return ECHOwnerOf(&v1alpha1.ECHKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-3"}})
}

func testECHRing(t *testing.T) echring.Ring {
	t.Helper()
	c, err := echring.NewConfig(7, bytes.Repeat([]byte{7}, echring.SeedSize), echring.Params{PublicName: "public.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	c.CreatedAt, c.ExpiresAt = t0, t0.Add(48*time.Hour)
	return echring.Ring{Ring: "shop/web", Epoch: 1, IssuedAt: t0, Configs: []echring.Config{c}}
}

// soonest is the earliest expiresAt of r's keys, found the long way.
func soonest(r keyring.Ring) time.Time {
	first := r.Keys[0].ExpiresAt
	for _, k := range r.Keys {
		if k.ExpiresAt.Before(first) {
			first = k.ExpiresAt
		}
	}
	return first
}

// orphaned is s as an orphan delete leaves it: the garbage collector has
// removed the deleted ring's owner references.
func orphaned(s *corev1.Secret) *corev1.Secret {
	s = s.DeepCopy()
	s.OwnerReferences = nil
	return s
}

func TestSecretsCarryTheirLastExpiry(t *testing.T) {
	r := testRing()
	first := soonest(r)
	if first.Equal(r.Keys[0].ExpiresAt) && len(r.Keys) > 1 && r.Keys[1].ExpiresAt.Equal(first) {
		t.Fatal("the test ring's keys expire together: it shows nothing")
	}
	snap, err := Snapshot(testOwner(), r, Requests{})
	if err != nil {
		t.Fatal(err)
	}
	ech, err := ECHSnapshot(echOwner(), testECHRing(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	old := snap.DeepCopy() // written before the annotation existed
	delete(old.Annotations, v1alpha1.ExpiresAtAnnotation)
	tests := []struct {
		name   string
		secret *corev1.Secret
		want   time.Time
		ok     bool
	}{
		{"a snapshot: its first key's expiresAt", snap, first.Truncate(time.Second), true},
		{"a projection: its snapshot's", Projection(testOwner("nginx"), snap, "shop"), first.Truncate(time.Second), true},
		{"a cluster ring's projection", Projection(clusterOwner(), snap, "shop-eu"), first.Truncate(time.Second), true},
		{"an ECH snapshot: its last config's", ech, t0.Add(48 * time.Hour), true},
		{"an ECH projection", Projection(echOwner(), ech, "shop"), t0.Add(48 * time.Hour), true},
		{"a snapshot written before the annotation", old, time.Time{}, false},
		{"a projection of it", Projection(testOwner(), old, "shop"), time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := AnnotatedExpiry(tt.secret)
			if ok != tt.ok || !got.Equal(tt.want) {
				t.Errorf("AnnotatedExpiry = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
			if ok && got.After(first) && tt.secret.Labels[v1alpha1.ECHRingLabel] == "" {
				t.Errorf("annotated expiry %v is later than the first key's %v", got, first)
			}
		})
	}
}

func TestDataExpiry(t *testing.T) {
	r := testRing()
	snap, err := Snapshot(testOwner(), r, Requests{})
	if err != nil {
		t.Fatal(err)
	}
	ech, err := ECHSnapshot(echOwner(), testECHRing(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	garbled := snap.DeepCopy()
	garbled.Data[keyring.FileName] = []byte(`{"version":1,"keys":[]}`)
	empty := snap.DeepCopy()
	empty.Data = nil
	tests := []struct {
		name    string
		secret  *corev1.Secret
		want    time.Time
		wantErr bool
	}{
		{"a ticket ring's snapshot: its first key's expiresAt", snap, soonest(r), false},
		{"its projection", Projection(testOwner("haproxy"), snap, "shop"), soonest(r), false},
		{"an ECH ring's", ech, t0.Add(48 * time.Hour), false},
		{"a ring file no reader accepts", garbled, time.Time{}, true},
		{"no data", empty, time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DataExpiry(tt.secret)
			if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
				t.Errorf("DataExpiry = %v, %v; want %v (error %v)", got, err, tt.want, tt.wantErr)
			}
			if err != nil && bytes.Contains([]byte(err.Error()), tt.secret.Data[keyring.FileName]) && len(tt.secret.Data[keyring.FileName]) > 0 {
				t.Errorf("the error quotes the data: %v", err)
			}
		})
	}
}

func TestOrphans(t *testing.T) {
	owner, cluster, ech := testOwner(), clusterOwner(), echOwner()
	snap, _ := Snapshot(owner, testRing(), Requests{})
	csnap, _ := Snapshot(cluster, testRing(), Requests{})
	esnap, _ := ECHSnapshot(ech, testECHRing(t), nil)

	opaque := orphaned(snap)
	opaque.Type = corev1.SecretTypeOpaque
	renamed := orphaned(snap)
	renamed.Name = "web-e1-copy"
	noEpoch := orphaned(snap)
	delete(noEpoch.Labels, v1alpha1.EpochLabel)
	hugeEpoch := orphaned(snap)
	hugeEpoch.Name, hugeEpoch.Labels[v1alpha1.EpochLabel] = "web-e9007199254740992", "9007199254740992"
	noComponent := orphaned(snap)
	delete(noComponent.Labels, v1alpha1.ComponentLabel)
	twoRings := orphaned(snap)
	twoRings.Labels[v1alpha1.ClusterRingLabel] = "web"
	emptyName := orphaned(Projection(owner, snap, "shop"))
	emptyName.Labels[v1alpha1.RingLabel] = ""
	ownedElsewhere := orphaned(snap)
	ownedElsewhere.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "uid-d"}}
	otherRingRef := Projection(owner, snap, "shop")
	otherRingRef.OwnerReferences[0].Name = "api"
	clusterAway := orphaned(csnap)
	clusterAway.Namespace = "shop"
	gone := Projection(OwnerOf(&v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-deleted"}}), snap, "shop")

	tests := []struct {
		name       string
		secret     *corev1.Secret
		live       Live
		orphan     bool
		superseded bool
	}{
		{"a snapshot its live ring controls", snap, Live{UID: "uid-1"}, false, false},
		{"a projection its live ring controls", Projection(owner, snap, "shop"), Live{UID: "uid-1"}, false, false},
		{"a snapshot after an orphan delete", orphaned(snap), Live{}, true, false},
		{"a projection after an orphan delete", orphaned(Projection(owner, snap, "shop")), Live{}, true, false},
		{"a cluster ring's snapshot after an orphan delete, in the operator's namespace", orphaned(csnap), Live{}, true, false},
		{"a cluster ring's projection in a target namespace", orphaned(Projection(cluster, csnap, "shop-eu")), Live{}, true, false},
		{"an ECH ring's snapshot", orphaned(esnap), Live{}, true, false},
		{"an ECH ring's projection", orphaned(Projection(ech, esnap, "shop")), Live{}, true, false},
		{"still owned by a deleted ring (removed while the operator was down)", gone, Live{}, true, false},
		{"an orphan under a ring created again", orphaned(snap), Live{UID: "uid-new"}, true, true},
		{"a deleted ring's Secret under a ring created again", gone, Live{UID: "uid-new"}, true, true},
		{"of another type: never ringmaster's", opaque, Live{}, false, false},
		{"a snapshot under a name the ring never gives", renamed, Live{}, false, false},
		{"a snapshot with no epoch", noEpoch, Live{}, false, false},
		{"a snapshot past the last epoch", hugeEpoch, Live{}, false, false},
		{"no component", noComponent, Live{}, false, false},
		{"labelled for two rings", twoRings, Live{}, false, false},
		{"labelled for a ring with no name", emptyName, Live{}, false, false},
		{"owned by something else", ownedElsewhere, Live{}, false, false},
		{"owned by another ring than it names", otherRingRef, Live{}, false, false},
		{"a cluster ring's snapshot outside the operator's namespace", clusterAway, Live{}, false, false},
		{"a snapshot its ring being deleted controls: the ring's to prune", snap, Live{UID: "uid-1", Deleting: true}, false, false},
		{"a projection its ring being deleted controls", Projection(owner, snap, "shop"), Live{UID: "uid-1", Deleting: true}, false, false},
		{"stripped by an orphan delete while the ring waits for the collector: goes at its expiry", orphaned(snap), Live{UID: "uid-1", Deleting: true}, true, false},
		{"a deleted ring's Secret while a ring of its name is being deleted: not taken over", gone, Live{UID: "uid-new", Deleting: true}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, ok := OrphanOf(tt.secret, home, tt.live)
			if ok != tt.orphan || o.Superseded != tt.superseded {
				t.Fatalf("OrphanOf = %+v, %v; want orphan %v, superseded %v", o, ok, tt.orphan, tt.superseded)
			}
			if !ok {
				return
			}
			if want := tt.secret.Labels[v1alpha1.ComponentLabel]; o.Component != want {
				t.Errorf("component %q, want %q", o.Component, want)
			}
			kind, key, _ := RingOf(tt.secret)
			if o.Kind != kind || o.Ring != key {
				t.Errorf("claims %s %s, the labels name %s %s", o.Kind, o.Ring, kind, key)
			}
		})
	}
}

func TestPredecessorTakesAnOrphansPlace(t *testing.T) {
	owner, cluster := testOwner(), clusterOwner()
	snap, _ := Snapshot(owner, testRing(), Requests{})
	csnap, _ := Snapshot(cluster, testRing(), Requests{})
	recreated := OwnerOf(&v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-again"}})
	clusterAgain := ClusterOwnerOf(&v1alpha1.ClusterTicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: "edge", UID: "uid-again"},
		Spec: v1alpha1.ClusterTicketKeyRingSpec{TicketKeyRingSpec: v1alpha1.TicketKeyRingSpec{Distribution: v1alpha1.Distribution{SecretName: "edge-keys"}}}}, home)
	elsewhere := orphaned(snap)
	elsewhere.Namespace = "other"
	opaque := orphaned(snap)
	opaque.Type = corev1.SecretTypeOpaque
	tests := []struct {
		name   string
		owner  Owner
		secret *corev1.Secret
		want   bool
	}{
		{"its own snapshot", owner, snap, false},
		{"the snapshot of a deleted ring of the name", recreated, snap, true},
		{"an orphaned snapshot of the name", recreated, orphaned(snap), true},
		{"an orphaned projection of the name", recreated, orphaned(Projection(owner, snap, "shop")), true},
		{"an orphaned cluster ring's projection", clusterAgain, orphaned(Projection(cluster, csnap, "shop")), true},
		{"an orphaned cluster ring's snapshot", clusterAgain, orphaned(csnap), true},
		{"an orphan of a ring of another name", OwnerOf(&v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "api", UID: "uid-api"}}), orphaned(snap), false},
		{"an orphan of a ring of another kind and the same name", clusterAgain, orphaned(Projection(OwnerOf(&v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "edge", UID: "u"}}), snap, "shop")), false},
		{"an orphan in another namespace", recreated, elsewhere, false},
		{"an unowned Secret of another type", recreated, opaque, false},
		{"anything, for a ring being deleted", func() Owner { o := recreated; o.Deleting = true; return o }(), orphaned(snap), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.owner.Predecessor(tt.secret); got != tt.want {
				t.Errorf("Predecessor = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOrphanDeadline(t *testing.T) {
	now := t0
	tests := []struct {
		name   string
		orphan Orphan
		expiry time.Time
		want   time.Time
	}{
		{"keys still live: at the last one's expiry", Orphan{}, now.Add(3 * time.Hour), now.Add(3 * time.Hour)},
		{"only expired keys: at once", Orphan{}, now.Add(-time.Minute), now},
		{"expiring now: now", Orphan{}, now, now},
		{"no key a reader accepts: at once", Orphan{}, time.Time{}, now},
		{"a ring of its name took its place: at once, keys live or not", Orphan{Superseded: true}, now.Add(3 * time.Hour), now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.orphan.Deadline(tt.expiry, now); !got.Equal(tt.want) {
				t.Errorf("Deadline = %v, want %v", got, tt.want)
			}
		})
	}
}
