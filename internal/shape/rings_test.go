package shape

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/ringplan"
	"github.com/ringmaster-io/ringmaster/internal/testing/maximal"
)

func shapeTKR(t *testing.T, r *v1alpha1.TicketKeyRing) *v1alpha1.TicketKeyRing {
	t.Helper()
	out, err := TicketKeyRing(r.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return out.(*v1alpha1.TicketKeyRing)
}

// A ring keeps, of its metadata, its requests and who made them, and of
// its managed fields nothing else.
func TestRingRequests(t *testing.T) {
	at := func(m int) *metav1.Time { return &metav1.Time{Time: time.Date(2026, 3, 1, 12, m, 0, 0, time.UTC)} }
	fields := metav1.NewFieldsV1
	ring := &v1alpha1.TicketKeyRing{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop",
		Annotations: map[string]string{v1alpha1.RotateRequestedAtAnnotation: "2026-03-01T12:03:00Z", v1alpha1.RevokeRequestedAtAnnotation: strings.Repeat("9", 65),
			"team": "payments"},
		Labels: map[string]string{"app": "web"},
		ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate, Time: at(0), FieldsType: "FieldsV1",
				FieldsV1: fields(`{"f:spec":{"f:rotationInterval":{},"f:retainedKeys":{}}}`)},
			{Manager: "ringmaster", Operation: metav1.ManagedFieldsOperationApply, Time: at(1), FieldsType: "FieldsV1", Subresource: "status",
				FieldsV1: fields(`{"f:status":{"f:epoch":{},"f:keys":{},"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{}}}}}`)},
			{Manager: "kubectl-ringmaster", Operation: metav1.ManagedFieldsOperationUpdate, Time: at(2), FieldsType: "FieldsV1",
				FieldsV1: fields(`{"f:metadata":{"f:annotations":{".":{},"f:ringmaster.io/revoke-requested-at":{},"f:team":{}}}}`)},
			{Manager: "oncall", Operation: metav1.ManagedFieldsOperationUpdate, Time: at(3), FieldsType: "FieldsV1",
				FieldsV1: fields(`{"f:metadata":{"f:annotations":{"f:ringmaster.io/rotate-requested-at":{}}}}`)},
			{Manager: "earlier", Operation: metav1.ManagedFieldsOperationUpdate, Time: at(1), FieldsType: "FieldsV1",
				FieldsV1: fields(`{"f:metadata":{"f:annotations":{"f:ringmaster.io/rotate-requested-at":{}}}}`)},
		}}}
	got := shapeTKR(t, ring)
	for _, a := range requestAnnotations {
		if b, w := ringplan.RequestedBy(got.GetManagedFields(), a), ringplan.RequestedBy(ring.GetManagedFields(), a); b != w {
			t.Errorf("%s requested by %q once shaped, %q whole", a, b, w)
		}
	}
	if n := len(got.GetManagedFields()); n != 2 {
		t.Fatalf("%d managed fields entries kept, want the 2 that set a request last: %+v", n, got.GetManagedFields())
	}
	for _, f := range got.GetManagedFields() {
		if strings.Contains(f.FieldsV1.GetRawString(), "team") || strings.Contains(f.FieldsV1.GetRawString(), "status") {
			t.Errorf("kept fields beyond the requests: %s", f.FieldsV1.GetRawString())
		}
	}
	digest := got.Annotations[AnnotationsDigest]
	want := map[string]string{v1alpha1.RotateRequestedAtAnnotation: "2026-03-01T12:03:00Z", v1alpha1.RevokeRequestedAtAnnotation: NotKept, AnnotationsDigest: digest}
	// Its labels are kept, for a FleetRequest's ringSelector.
	if !equality.Semantic.DeepEqual(got.Annotations, want) || !equality.Semantic.DeepEqual(got.Labels, ring.Labels) || len(digest) == 0 {
		t.Errorf("annotations %v, labels %v; want %v and %v", got.Annotations, got.Labels, want, ring.Labels)
	}
	if _, ok := ringplan.Request(got.Annotations[v1alpha1.RevokeRequestedAtAnnotation]); ok {
		t.Error("a request too long to be one is kept as one")
	}
	if again := shapeTKR(t, got); !equality.Semantic.DeepEqual(again, got) {
		t.Errorf("shaping its own output changed it: %+v", again.ObjectMeta)
	}
	// Any annotation's change shows, in the digest: a reconcile asked for
	// by annotating the ring still starts one.
	poked := ring.DeepCopy()
	poked.Annotations["test.ringmaster.io/poke"] = "1"
	if shapeTKR(t, poked).Annotations[AnnotationsDigest] == digest {
		t.Error("an annotation's change does not show in what the cache keeps")
	}
}

// A selector over the bound selects nothing once kept, and the ring says
// which; the rest of the spec is kept.
func TestRingSelectors(t *testing.T) {
	r := maximal.TicketKeyRing("shop", "web", "s")
	r.Spec.Confirmation.VoterNamespaceSelector = maximal.Selector("voters")
	got := shapeTKR(t, r)
	if c := Cut(got); !slices.Equal(c, []string{CutPodSelector, CutVoterNamespaceSelector}) {
		t.Errorf("cut %v", c)
	}
	for _, s := range []*metav1.LabelSelector{&got.Spec.Confirmation.PodSelector, got.Spec.Confirmation.VoterNamespaceSelector} {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			t.Fatal(err)
		}
		if sel.Matches(labels.Set{}) || sel.Matches(labels.Set{"ringmaster.io/selector-not-kept": ""}) {
			t.Errorf("a selector not kept matches: %v", sel)
		}
	}
	if got.Spec.RotationInterval != r.Spec.RotationInterval || got.Spec.Confirmation.Port != r.Spec.Confirmation.Port {
		t.Errorf("spec lost: %+v", got.Spec)
	}
	if msg := SpecCut(got); !strings.Contains(msg, CutPodSelector) || !strings.Contains(msg, "4096 bytes") {
		t.Errorf("SpecCut = %q", msg)
	}
	small := maximal.TicketKeyRing("shop", "web", "s")
	small.Spec.Confirmation.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	small.Spec.Confirmation.VoterNamespaceSelector = nil
	if kept := shapeTKR(t, small); Cut(kept) != nil || SpecCut(kept) != "" || !equality.Semantic.DeepEqual(kept.Spec, small.Spec) {
		t.Errorf("a small selector was cut: %v %+v", Cut(kept), kept.Spec.Confirmation)
	}
	// Finalizers: ringmaster's first, then the first others.
	e := maximal.ECHKeyRing("shop", "web", "s")
	maximal.Metadata(e, "s", true)
	e.Finalizers = append(e.Finalizers, v1alpha1.ECHDNSFinalizer)
	out, err := ECHKeyRing(e)
	if err != nil {
		t.Fatal(err)
	}
	f := out.(*v1alpha1.ECHKeyRing).Finalizers
	if len(f) != MaxFinalizers || f[0] != v1alpha1.ECHDNSFinalizer || !WasCut(out.(*v1alpha1.ECHKeyRing), CutFinalizers) {
		t.Errorf("finalizers kept %v", f)
	}
}

// Rings decoded one by one share their conditions' and keys' strings once
// cached, and keep their values.
func TestRingStatusInterned(t *testing.T) {
	decoded := func() *v1alpha1.TicketKeyRing {
		r := &v1alpha1.TicketKeyRing{}
		if err := json.Unmarshal([]byte(`{"metadata":{"name":"web","namespace":"shop"},"status":{
			"conditions":[{"type":"Ready","status":"True","reason":"Published","message":"Epoch 2 is published to 1 namespace(s)"}],
			"activeKey":{"id":"29865907"},"keys":[{"id":"29865907","state":"active"}],"lastRotateRequestedAt":"2026-12-03T10:30:44Z"}}`), r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	r1, r2 := shapeTKR(t, decoded()), shapeTKR(t, decoded())
	c1, c2 := r1.Status.Conditions[0], r2.Status.Conditions[0]
	if !same(c1.Message, c2.Message) || !same(c1.Reason, c2.Reason) || !same(string(r1.Status.Keys[0].State), string(r2.Status.Keys[0].State)) ||
		!same(r1.Status.ActiveKey.ID, r1.Status.Keys[0].ID) || !same(r1.Status.LastRotateRequestedAt, r2.Status.LastRotateRequestedAt) {
		t.Error("two rings decoded apart keep their own copies of the strings their statuses share")
	}
	if !equality.Semantic.DeepEqual(r1.Status, decoded().Status) {
		t.Errorf("interning changed the ring: %+v", r1.Status)
	}
}
