package audit_test

import (
	"crypto"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

const (
	day     = 24 * time.Hour
	minute  = time.Minute
	hour    = time.Hour
	seconds = time.Second
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(d)) }

func cond(typ string, status metav1.ConditionStatus, reason, msg string, gen int64) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen}
}

// healthy is a ring of interval 1h, 2 retained keys: staged, active for
// 20m, one decrypt-only.
func healthy() audit.Ring {
	return audit.Ring{
		Kind: audit.KindTicketKeyRing, Namespace: "shop", Name: "web", Generation: 1,
		Spec: v1alpha1.TicketKeyRingSpec{RotationInterval: metav1.Duration{Duration: hour}, RetainedKeys: 2},
		Status: v1alpha1.TicketKeyRingStatus{
			Epoch: 3,
			Keys: []v1alpha1.KeyStatus{
				{ID: "cccccccc", State: "staged", ActiveFrom: at(40 * minute), RetireAt: at(100 * minute), ExpiresAt: at(220 * minute)},
				{ID: "bbbbbbbb", State: "active", ActiveFrom: at(-20 * minute), RetireAt: at(40 * minute), ExpiresAt: at(160 * minute)},
				{ID: "aaaaaaaa", State: "decrypt-only", ActiveFrom: at(-80 * minute), RetireAt: at(-20 * minute), ExpiresAt: at(100 * minute)},
			},
			Conditions: []metav1.Condition{
				cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonPublished, "Epoch 3 is published to 1 namespace(s)", 1),
				cond(v1alpha1.ConditionRotationOverdue, metav1.ConditionFalse, v1alpha1.ReasonOnSchedule, "No rotation is overdue", 1),
			},
		},
	}
}

func TestRingRows(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*audit.Ring)
		later   time.Duration // the audit runs this long after now
		want    []audit.Category
		message string // a problem's message contains it
		keyID   string
		keyAge  time.Duration
	}{
		{name: "on schedule", keyID: "bbbbbbbb", keyAge: 20 * minute},
		{
			name: "the operator reports a rotation overdue",
			mutate: func(r *audit.Ring) {
				r.Status.Conditions = []metav1.Condition{
					cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonMintFailed, "Minting 1 key(s) failed: vault sealed", 1),
					cond(v1alpha1.ConditionRotationOverdue, metav1.ConditionTrue, v1alpha1.ReasonVaultUnavailable, "A new key has been due since ...", 1),
				}
			},
			want: []audit.Category{audit.Overdue, audit.NotReady}, message: "vault sealed", keyID: "bbbbbbbb", keyAge: 20 * minute,
		},
		{
			// Nobody wrote status for 2h: by the clock the staged key has
			// been active for 80m with no successor, and the oldest key
			// expired 20m ago.
			name: "stale status: the operator is gone", later: 2 * hour,
			want: []audit.Category{audit.Overdue, audit.KeyAge, audit.Overdue}, message: "has not written the ring's status since",
			keyID: "cccccccc", keyAge: 80 * minute,
		},
		{
			name: "within the grace of the operator's lag", later: 40*minute + 30*seconds,
			keyID: "cccccccc", keyAge: 30 * seconds,
		},
		{
			name: "failed targets",
			mutate: func(r *audit.Ring) {
				r.Kind, r.Namespace, r.Status.Targets = audit.KindClusterTicketKeyRing, "", 12
				r.Status.FailedTargets = []v1alpha1.TargetFailure{{Namespace: "legacy", Reason: v1alpha1.ReasonSecretConflict, Message: "Secret legacy/web-ticket-keys exists and is not this ring's"}}
				r.Status.Conditions[0] = cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonSecretConflict, "Epoch 3 reached 11 of 12 namespace(s); not legacy: see status.failedTargets", 1)
			},
			want: []audit.Category{audit.FailedTargets}, message: "legacy (SecretConflict: Secret legacy/web-ticket-keys exists and is not this ring's)",
			keyID: "bbbbbbbb", keyAge: 20 * minute,
		},
		{
			// Under spec.confirmation, a pod has not confirmed the due key
			// past the timeout; the active key keeps encrypting.
			name: "confirmation overdue", later: 50 * minute,
			mutate: func(r *audit.Ring) {
				r.Status.Keys[0].ActiveFrom, r.Status.Keys[1].RetireAt = at(70*minute), at(70*minute)
				r.Status.Conditions = append(r.Status.Conditions, cond(v1alpha1.ConditionConfirmationOverdue, metav1.ConditionTrue, v1alpha1.ReasonAwaitingPods, "1 of 3 pods do not hold key cccccccc: shop/web-2 on node-b (connection refused)", 1))
			},
			want: []audit.Category{audit.Overdue, audit.KeyAge}, message: "confirmation overdue (AwaitingPods): 1 of 3 pods",
			keyID: "bbbbbbbb", keyAge: 70 * minute,
		},
		{
			name:   "a new generation not yet published",
			mutate: func(r *audit.Ring) { r.Generation = 2 },
			want:   []audit.Category{audit.NotReady}, message: "not yet published generation 2", keyID: "bbbbbbbb", keyAge: 20 * minute,
		},
		{
			// Every key expired while the key source failed: the operator
			// destroyed them all, and still says the rotation is overdue.
			name: "no key left",
			mutate: func(r *audit.Ring) {
				r.Status.Keys = nil
				r.Status.Conditions = []metav1.Condition{
					cond(v1alpha1.ConditionRotationOverdue, metav1.ConditionTrue, v1alpha1.ReasonVaultUnavailable, "A new key has been due since ...", 1),
					cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonVaultUnavailable, "Minting 2 key(s) failed", 1),
				}
			},
			want: []audit.Category{audit.Overdue, audit.Overdue, audit.NotReady}, message: "the ring holds no key",
		},
		{
			// The key-less epoch, read from a status whose conditions the
			// operator has not written: no staged key to name, no panic.
			name: "no key left, conditions not written",
			mutate: func(r *audit.Ring) {
				r.Status.Keys = nil
				r.Status.Conditions = []metav1.Condition{cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonPublished, "Epoch 4 is published", 1)}
			},
			want: []audit.Category{audit.Overdue}, message: "the ring holds no key",
		},
		{
			name:   "nothing published yet",
			mutate: func(r *audit.Ring) { r.Status = v1alpha1.TicketKeyRingStatus{} },
			want:   []audit.Category{audit.NotReady}, message: "has not reported on the ring yet",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := healthy()
			if tc.mutate != nil {
				tc.mutate(&r)
			}
			rep := audit.Build(audit.Input{Now: now.Add(tc.later), Rings: []audit.Ring{r}})
			row := rep.Rows[0]
			var got []audit.Category
			var msgs []string
			for _, p := range row.Problems {
				got = append(got, p.Categories...)
				msgs = append(msgs, p.Message)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("categories %v, want %v; problems %q", got, tc.want, msgs)
			}
			if tc.message != "" && !strings.Contains(strings.Join(msgs, "\n"), tc.message) {
				t.Errorf("no problem says %q: %q", tc.message, msgs)
			}
			if row.KeyID != tc.keyID || (tc.keyID != "" && row.KeyAge.Duration != tc.keyAge) {
				t.Errorf("key %q aged %v, want %q aged %v", row.KeyID, row.KeyAge, tc.keyID, tc.keyAge)
			}
			if tc.keyID != "" && (row.MaxKeyAge.Duration != hour || !row.Expires.Time.Equal(now.Add(100*minute))) {
				t.Errorf("limit %v, expires %v: want the interval and the oldest key's expiry", row.MaxKeyAge, row.Expires)
			}
		})
	}
}

// pki issues the certificates of the certificate tests.
type pki struct {
	t  *testing.T
	ca *testpki.CA
}

func (p pki) cert(key crypto.Signer, from, to time.Duration) []byte {
	p.t.Helper()
	if key == nil {
		var err error
		if key, err = testpki.NewKey(testpki.ECDSAP256); err != nil {
			p.t.Fatal(err)
		}
	}
	is, err := p.ca.Issue(testpki.Leaf{DNSNames: []string{"www.example.com"}, NotBefore: now.Add(from), NotAfter: now.Add(to), Key: key})
	if err != nil {
		p.t.Fatal(err)
	}
	return is.CertPEM
}

func managedBy(name string) map[string]string {
	return map[string]string{cmapi.CertificateNameKey: name, cmapi.IssuerNameAnnotationKey: "ca", cmapi.IssuerKindAnnotationKey: "ClusterIssuer"}
}

func certificate(ns, name, secret string, never bool) cmapi.Certificate {
	c := cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       cmapi.CertificateSpec{SecretName: secret, IssuerRef: cmmeta.IssuerReference{Name: "ca", Kind: "ClusterIssuer"}},
	}
	if never {
		c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{RotationPolicy: cmapi.RotationPolicyNever}
	}
	return c
}

func TestFacts(t *testing.T) {
	ca, err := testpki.NewCA("audit")
	if err != nil {
		t.Fatal(err)
	}
	p := pki{t, ca}
	shared, err := testpki.NewKey(testpki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	crts := []cmapi.Certificate{certificate("shop", "api", "api-tls", false), certificate("shop", "pending", "pending-tls", false)}
	secrets := []audit.TLSSecret{
		{Namespace: "shop", Name: "api-tls", Annotations: managedBy("api"), Cert: p.cert(nil, -2*day, 60*day)},
		// The same key in two Secrets no Certificate manages, listed
		// youngest first: both are as old as the earliest.
		{Namespace: "shop", Name: "copy", Cert: p.cert(shared, -day, 60*day)},
		{Namespace: "legacy", Name: "old", Cert: p.cert(shared, -100*day, 60*day)},
		// Annotated with a Certificate that names another Secret: judged
		// as a Secret.
		{Namespace: "shop", Name: "stray", Annotations: managedBy("api"), Cert: p.cert(nil, -day, day)},
		{Namespace: "shop", Name: "broken", Cert: []byte("not a certificate")},
	}
	byID := map[string]string{}
	for _, f := range audit.Facts(crts, secrets, true) {
		var desc string
		switch {
		case f.Subject.Cert != nil:
			desc = "since " + f.Subject.KeySince.UTC().Format(time.RFC3339)
		case f.Subject.ReadError != "":
			desc = f.Subject.ReadError
		default:
			desc = "not issued"
		}
		byID[f.ID.String()] = desc
	}
	want := map[string]string{
		"Certificate/shop/api":     "since " + now.Add(-2*day).Format(time.RFC3339),
		"Certificate/shop/pending": "not issued",
		"Secret/shop/copy":         "since " + now.Add(-100*day).Format(time.RFC3339),
		"Secret/legacy/old":        "since " + now.Add(-100*day).Format(time.RFC3339),
		"Secret/shop/stray":        "since " + now.Add(-day).Format(time.RFC3339),
		"Secret/shop/broken":       "Secret shop/broken: tls.crt: no PEM CERTIFICATE block",
	}
	if len(byID) != len(want) {
		t.Errorf("facts %v, want %v", byID, want)
	}
	for id, w := range want {
		if byID[id] != w {
			t.Errorf("%s: %q, want %q", id, byID[id], w)
		}
	}

	// Without the right to list Certificates, a Secret cert-manager
	// annotated is taken to be its Certificate's, as the operator judges it.
	for _, f := range audit.Facts(nil, secrets, false) {
		if f.ID.Name == "api-tls" || f.ID.Name == "stray" {
			t.Errorf("%s judged as a Secret though cert-manager manages it", f.ID)
		}
	}
}

func TestCertificateRows(t *testing.T) {
	ca, err := testpki.NewCA("audit")
	if err != nil {
		t.Fatal(err)
	}
	p := pki{t, ca}
	edge := v1alpha1.CertificatePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Generation: 1},
		Spec: v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}},
			Rules:    v1alpha1.CertificateRules{MaxKeyAge: &metav1.Duration{Duration: 90 * day}},
			Action:   v1alpha1.ActionAudit,
		},
		Status: v1alpha1.CertificatePolicyStatus{
			Evaluated: 2, Violating: 1,
			Conditions: []metav1.Condition{
				cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonEvaluated, "Evaluated 2 certificate(s)", 1),
				cond(v1alpha1.ConditionCompliant, metav1.ConditionFalse, v1alpha1.ReasonViolationsFound, "1 of 2 selected certificate(s) break a rule: maxKeyAge (1)", 1),
			},
			Violations: []v1alpha1.Violation{{CertificateRef: v1alpha1.CertificateRef{Kind: v1alpha1.KindSecret, Namespace: "shop", Name: "old"}, Rule: "maxKeyAge", Message: "key 1234 since ... is older than maxKeyAge 90d"}},
			// The operator remembers the key of shop/renewed from a
			// certificate it no longer sees.
			OldestKey: &v1alpha1.KeyAgeRef{CertificateRef: v1alpha1.CertificateRef{Kind: v1alpha1.KindSecret, Namespace: "shop", Name: "renewed"}, Since: at(-200 * day)},
		},
	}
	strict := v1alpha1.CertificatePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "strict", Generation: 1},
		Spec: v1alpha1.CertificatePolicySpec{
			Selector: v1alpha1.CertificateSelector{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}},
			Rules:    v1alpha1.CertificateRules{MaxKeyAge: &metav1.Duration{Duration: 30 * day}},
		},
	}
	in := audit.Input{
		Now:      now,
		Policies: []v1alpha1.CertificatePolicy{edge, strict},
		TLSSecrets: []audit.TLSSecret{
			{Namespace: "shop", Name: "old", Cert: p.cert(nil, -100*day, 100*day)},
			{Namespace: "shop", Name: "renewed", Cert: p.cert(nil, -day, 89*day)},
			{Namespace: "shop", Name: "api", Labels: map[string]string{"app": "api"}, Cert: p.cert(nil, -40*day, 3*day)},
			{Namespace: "dev", Name: "unselected", Cert: p.cert(nil, -400*day, -day)},
		},
		SecretsRead: true, CertificatesRead: true,
		NamespaceLabels: map[string]map[string]string{"shop": {"tier": "edge"}, "dev": {}},
		ExpiryWindow:    7 * day,
	}

	rows := map[string]audit.Row{}
	for _, r := range audit.Build(in).Rows {
		rows[r.Ref()] = r
	}
	if _, ok := rows["Secret dev/unselected"]; ok {
		t.Error("a certificate no policy selects is audited")
	}
	old := rows["Secret shop/old"]
	if old.KeyAge.Duration != 100*day || old.MaxKeyAge.Duration != 90*day || len(old.Problems) != 1 ||
		!slices.Equal(old.Problems[0].Categories, []audit.Category{audit.Violations, audit.KeyAge}) || !strings.HasPrefix(old.Problems[0].Message, "edge/maxKeyAge: key 1234") {
		t.Errorf("shop/old: %+v", old)
	}
	if r := rows["Secret shop/renewed"]; r.KeySince == nil || !r.KeySince.Time.Equal(now.Add(-200*day)) || !slices.ContainsFunc(r.Problems, func(p audit.Problem) bool { return slices.Equal(p.Categories, []audit.Category{audit.KeyAge}) }) {
		t.Errorf("shop/renewed takes the operator's older date, over maxKeyAge: %+v", r)
	}
	api := rows["Secret shop/api"]
	var cats []audit.Category
	for _, p := range api.Problems {
		cats = append(cats, p.Categories...)
	}
	if !slices.Equal(api.Policies, []string{"edge", "strict"}) || api.MaxKeyAge.Duration != 30*day || !slices.Equal(cats, []audit.Category{audit.KeyAge, audit.ExpiredSoon}) {
		t.Errorf("shop/api: policies %v, limit %v, problems %+v", api.Policies, api.MaxKeyAge, api.Problems)
	}
	if pol := rows["CertificatePolicy.ringmaster.io edge"]; len(pol.Problems) != 1 || pol.Problems[0].Message != "1 of 2 selected certificate(s) break a rule: maxKeyAge (1)" || pol.KeyAge.Duration != 200*day {
		t.Errorf("policy edge: %+v", pol)
	}
	if pol := rows["CertificatePolicy.ringmaster.io strict"]; len(pol.Problems) != 1 || !slices.Equal(pol.Problems[0].Categories, []audit.Category{audit.NotReady}) {
		t.Errorf("policy strict, never evaluated: %+v", pol)
	}

	// Without the right to read Secrets, what the policies' status names.
	in.TLSSecrets, in.SecretsRead = nil, false
	in.Namespace = "shop"
	rep := audit.Build(in)
	var refs []string
	for _, r := range rep.Rows {
		refs = append(refs, r.Ref())
	}
	if !slices.Equal(refs, []string{"Secret shop/old", "Secret shop/renewed"}) {
		t.Fatalf("rows %q, want the two certificates the status names, no policy rows in a namespace", refs)
	}
	if r := rep.Rows[1]; r.KeyID != "" || !r.KeySince.Time.Equal(now.Add(-200*day)) || r.MaxKeyAge == nil || r.MaxKeyAge.Duration != 90*day || !strings.HasPrefix(r.Detail, "not read") {
		t.Errorf("from status: %+v", r)
	}
}

func TestParseCategories(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []audit.Category
		wantErr string
	}{
		{in: "", want: nil},
		{in: "overdue, violations,overdue", want: []audit.Category{audit.Overdue, audit.Violations}},
		{in: "all", want: audit.Categories},
		{in: "overdue,old", wantErr: `unknown category "old": want all, or some of overdue,key-age,expired-soon,violations,failed-targets,not-ready,at-rest,unmanaged-keys`},
	} {
		got, err := audit.ParseCategories(tc.in)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestBrokenAndBlind(t *testing.T) {
	late := healthy()
	late.Name = "late"
	late.Status.Conditions[1] = cond(v1alpha1.ConditionRotationOverdue, metav1.ConditionTrue, v1alpha1.ReasonMintFailed, "due", 1)
	rep := audit.Build(audit.Input{Now: now, Rings: []audit.Ring{healthy(), late}, Notes: []audit.Note{
		{Message: "Secrets: forbidden", Blinds: []audit.Category{audit.KeyAge, audit.ExpiredSoon}},
	}})
	if rep.Rows[0].Name != "late" {
		t.Errorf("rows %v: problems do not come first", rep.Rows)
	}
	if got := rep.Broken([]audit.Category{audit.Overdue}); len(got) != 1 || got[0].Ref != "TicketKeyRing shop/late" {
		t.Errorf("Broken(overdue) = %+v", got)
	}
	if got := rep.Broken([]audit.Category{audit.Violations}); len(got) != 0 {
		t.Errorf("Broken(violations) = %+v", got)
	}
	if len(rep.Blind([]audit.Category{audit.Overdue})) != 0 || len(rep.Blind([]audit.Category{audit.ExpiredSoon})) != 1 {
		t.Error("Blind does not follow the notes' categories")
	}
}
