package certpolicy_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
	"github.com/ringmaster-io/ringmaster/internal/testing/testpki"
)

// newCA makes an authority valid from t0+from to t0+to.
func newCA(t *testing.T, name string, kt testpki.KeyType, from, to time.Duration, parent *testpki.CA) *testpki.CA {
	t.Helper()
	ca, err := testpki.NewCAWith(testpki.CAOptions{Name: name, KeyType: kt, NotBefore: t0.Add(from), NotAfter: t0.Add(to), Parent: parent})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// podRequest is a PodCertificateRequest as a kubelet makes it, and, when
// chain is set, as a signer issued it (beginRefreshAt at t0+refresh).
func podRequest(t *testing.T, signer string, kt testpki.KeyType, maxExp *int32, chain []byte, refresh time.Duration, cond string) *certificatesv1.PodCertificateRequest {
	t.Helper()
	csr, err := testpki.CSR(key(t, kt))
	if err != nil {
		t.Fatal(err)
	}
	pcr := &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "req-1"},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName: signer, PodName: "web-0", PodUID: "uid-web-0", ServiceAccountName: "web", ServiceAccountUID: "uid-sa",
			NodeName: "node", NodeUID: "uid-node", MaxExpirationSeconds: maxExp, StubPKCS10Request: csr,
		},
	}
	if cond != "" {
		pcr.Status.Conditions = []metav1.Condition{{Type: cond, Status: metav1.ConditionTrue, Reason: "Because", Message: "the signer said so"}}
	}
	if chain != nil {
		pcr.Status.CertificateChain = string(chain)
		pcr.Status.BeginRefreshAt = &metav1.Time{Time: t0.Add(refresh)}
	}
	return pcr
}

func TestReadPodRequest(t *testing.T) {
	inter := newCA(t, "mesh intermediate", p256, -30*day, 300*day, testCA)
	leaf, err := inter.Issue(testpki.Leaf{DNSNames: []string{"web.shop.svc"}, Key: key(t, p384), NotBefore: t0.Add(-hour), NotAfter: t0.Add(23 * hour)})
	if err != nil {
		t.Fatal(err)
	}
	chain := append(slices.Clone(leaf.CertPEM), inter.PEM...)

	r := certpolicy.ReadPodRequest(podRequest(t, "example.com/mesh", p384, nil, chain, 15*hour, "Issued"))
	if r.Error != "" || r.Cert == nil {
		t.Fatalf("read: %+v", r)
	}
	if got := r.Request; got.State != certpolicy.RequestIssued || got.KeyAlgorithm != certpolicy.ECDSA || got.KeySize != 384 ||
		got.MaxExpirationSeconds != certpolicy.DefaultMaxExpirationSeconds || got.ServiceAccount != "web" || !got.BeginRefreshAt.Equal(t0.Add(15*hour)) {
		t.Errorf("request = %+v", got)
	}
	if r.Cert.IsCA || len(r.CAs.Certs) != 1 || !r.CAs.Certs[0].IsCA || r.CAs.Certs[0].CommonName != "mesh intermediate" {
		t.Errorf("leaf %+v, CAs %+v", r.Cert, r.CAs)
	}

	denied := certpolicy.ReadPodRequest(podRequest(t, "example.com/mesh", ed, ptr.To[int32](3600), nil, 0, "Denied"))
	if denied.Request.State != certpolicy.RequestDenied || denied.Request.KeyAlgorithm != certpolicy.Ed25519 || denied.Cert != nil || denied.Request.Reason != "Because" {
		t.Errorf("denied = %+v", denied)
	}
	pending := certpolicy.ReadPodRequest(podRequest(t, "example.com/mesh", p256, nil, nil, 0, ""))
	if pending.Request.State != certpolicy.RequestPending {
		t.Errorf("pending = %+v", pending)
	}
	bad := podRequest(t, "example.com/mesh", p256, nil, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), hour, "Issued")
	if r := certpolicy.ReadPodRequest(bad); r.Error == "" || strings.Contains(r.Error, "AAAA") {
		t.Errorf("a chain that does not parse: error %q, and it never quotes the data", r.Error)
	}
}

func TestEvaluatePodCertificates(t *testing.T) {
	issued := func(kt testpki.KeyType, from, to time.Duration, dns ...string) *certpolicy.Certificate {
		c, err := certpolicy.Parse(issue(t, spec{key: kt, from: from, to: to, dns: dns}))
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	request := func(state certpolicy.RequestState, refresh time.Duration) *certpolicy.PodRequest {
		r := &certpolicy.PodRequest{SignerName: "example.com/mesh", ServiceAccount: "web", MaxExpirationSeconds: 86400,
			KeyAlgorithm: certpolicy.ECDSA, KeySize: 256, State: state}
		if refresh != 0 {
			r.BeginRefreshAt = t0.Add(refresh)
		}
		if state != certpolicy.RequestIssued && state != certpolicy.RequestPending {
			r.Reason, r.Message = "UnsupportedKeyType", "use ECDSAP256"
		}
		return r
	}
	fresh := certpolicy.Subject{Cert: issued(p256, -hour, 23*hour, "web.shop.svc"), Pod: request(certpolicy.RequestIssued, 15*hour)}
	margin := certpolicy.Policy{RefreshOverdueAfter: 30 * time.Minute}

	for _, tc := range []struct {
		name    string
		policy  certpolicy.Policy
		s       certpolicy.Subject
		at      time.Duration
		state   certpolicy.PodState
		want    []want
		recheck time.Duration
	}{
		{name: "issued, before beginRefreshAt: fresh", policy: margin, s: fresh, state: certpolicy.PodFresh, recheck: 15*hour + 30*time.Minute + time.Nanosecond},
		{name: "past beginRefreshAt within the margin: fresh", policy: margin, s: fresh, at: 15*hour + 20*time.Minute, state: certpolicy.PodFresh, recheck: 15*hour + 30*time.Minute + time.Nanosecond},
		{name: "past beginRefreshAt plus the margin: overdue for refresh", policy: margin, s: fresh, at: 16 * hour, state: certpolicy.PodOverdueForRefresh,
			want: []want{{certpolicy.RefreshOverdue, []string{"not refreshed since beginRefreshAt 2026-12-01T03:00:00Z", "past refreshOverdueAfter 30m0s"}}}, recheck: 23*hour + time.Nanosecond},
		{name: "superseded by a newer request: never overdue", policy: margin, at: 16 * hour, state: certpolicy.PodFresh, recheck: 23*hour + time.Nanosecond,
			s: certpolicy.Subject{Cert: fresh.Cert, Pod: func() *certpolicy.PodRequest { r := *fresh.Pod; r.Superseded = true; return &r }()}},
		{name: "without refreshOverdueAfter: never overdue", s: fresh, at: 22 * hour, state: certpolicy.PodFresh, recheck: 23*hour + time.Nanosecond},
		{name: "past notAfter: expired, and validity", policy: margin, s: fresh, at: 24 * hour, state: certpolicy.PodExpired,
			want: []want{{certpolicy.Validity, []string{"expired at"}}}},
		{name: "denied by its signer", s: certpolicy.Subject{Pod: request(certpolicy.RequestDenied, 0)}, state: certpolicy.PodDenied,
			want: []want{{certpolicy.Issued, []string{`denied by signer "example.com/mesh": UnsupportedKeyType: use ECDSAP256`}}}},
		{name: "failed by its signer", s: certpolicy.Subject{Pod: request(certpolicy.RequestFailed, 0)}, state: certpolicy.PodFailed,
			want: []want{{certpolicy.Issued, []string{`failed by signer`}}}},
		{name: "pending", s: certpolicy.Subject{Pod: request(certpolicy.RequestPending, 0)}, state: certpolicy.PodPending},
		{name: "signer not allowed", policy: certpolicy.Policy{AllowedSignerNames: []string{"example.com/web-*"}}, s: fresh, state: certpolicy.PodFresh,
			want: []want{{certpolicy.AllowedSignerNames, []string{`signer "example.com/mesh" not allowed by allowedSignerNames "example.com/web-*"`}}}, recheck: 23*hour + time.Nanosecond},
		{name: "signer allowed by a pattern", policy: certpolicy.Policy{AllowedSignerNames: []string{"example.com/*"}}, s: fresh, state: certpolicy.PodFresh, recheck: 23*hour + time.Nanosecond},
		{name: "asks for longer than maxExpirationSeconds", policy: certpolicy.Policy{MaxExpirationSeconds: 3600}, s: fresh, state: certpolicy.PodFresh,
			want: []want{{certpolicy.MaxExpirationSeconds, []string{"requests a lifetime of up to 86400s; maxExpirationSeconds is 3600"}}}, recheck: 23*hour + time.Nanosecond},
		{name: "pending request with a key keyAlgorithms refuses: judged by the requested key",
			policy: certpolicy.Policy{KeyAlgorithms: []certpolicy.AllowedKey{{Algorithm: certpolicy.ECDSA, MinSize: 384}}},
			s:      certpolicy.Subject{Pod: request(certpolicy.RequestPending, 0)}, state: certpolicy.PodPending,
			want: []want{{certpolicy.KeyAlgorithms, []string{"requested key is ECDSA 256"}}}},
		{name: "issued: the leaf's key, names and validity judged as any leaf",
			policy: certpolicy.Policy{MaxValidity: 12 * hour, DeniedDNSNames: []string{"**.svc"}, KeyAlgorithms: []certpolicy.AllowedKey{{Algorithm: certpolicy.RSA}}},
			s:      fresh, state: certpolicy.PodFresh,
			want: []want{{certpolicy.MaxValidity, []string{"valid for 24h"}}, {certpolicy.KeyAlgorithms, []string{"key is ECDSA 256"}},
				{certpolicy.DeniedDNSNames, []string{`"web.shop.svc" denied by deniedDNSNames`}}}, recheck: 23*hour + time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := certpolicy.Evaluate(tc.policy, tc.s, t0.Add(tc.at))
			if v.PodState != tc.state {
				t.Errorf("state %q, want %q", v.PodState, tc.state)
			}
			checkViolations(t, v.Violations, tc.want)
			if want := timeAt(tc.recheck); !v.Recheck.Equal(want) {
				t.Errorf("recheck %v, want %v", v.Recheck, want)
			}
		})
	}
}

func TestEvaluateCAs(t *testing.T) {
	chainOf := func(cas ...*testpki.CA) certpolicy.Chain {
		var certs []certpolicy.Certificate
		for _, ca := range cas {
			certs = append(certs, certpolicy.FromX509(ca.Cert))
		}
		return certpolicy.CAChain(certs)
	}
	root := newCA(t, "root", p384, -365*day, 3650*day, nil)
	shortRoot := newCA(t, "short", p256, -day, 20*day, nil)
	rsaRoot := newCA(t, "rsa", rsa1024, -day, 365*day, nil)
	oldRoot := newCA(t, "old", p256, -400*day, -day, nil)
	strict := &certpolicy.CAPolicy{MaxValidity: 5 * 365 * day, MinValidity: 30 * day, MinRemainingValidity: 30 * day,
		KeyAlgorithms: []certpolicy.AllowedKey{{Algorithm: certpolicy.ECDSA, MinSize: 256}}}

	for _, tc := range []struct {
		name    string
		policy  *certpolicy.CAPolicy
		s       certpolicy.Subject
		want    []want
		recheck time.Duration
	}{
		{name: "no CA rules: an expired CA in a bundle still violates caValidity", s: certpolicy.Subject{CAs: chainOf(oldRoot)},
			want: []want{{certpolicy.CAValidity, []string{`CA "old" (key`, "expired at 2026-11-29T12:00:00Z"}}}},
		{name: "a compliant bundle", policy: &certpolicy.CAPolicy{MaxValidity: 20 * 365 * day, MinRemainingValidity: 30 * day},
			s: certpolicy.Subject{CAs: chainOf(root)}, recheck: 3620 * day},
		{name: "too long, too short, near expiry, weak key: each rule names its CAs", policy: strict,
			s: certpolicy.Subject{CAs: chainOf(root, shortRoot, rsaRoot)},
			want: []want{
				{certpolicy.CAMaxValidity, []string{`CA "root"`, "valid for 4015d", "caRules.maxValidity is 1825d"}},
				{certpolicy.CAMinValidity, []string{`CA "short"`, "valid for 21d", "caRules.minValidity is 30d"}},
				{certpolicy.CAMinRemainingValidity, []string{`CA "short"`, "expires at 2026-12-20T12:00:00Z, within caRules.minRemainingValidity 30d"}},
				{certpolicy.CAKeyAlgorithms, []string{`CA "rsa"`, "key is RSA 1024; keyAlgorithms allows ECDSA"}},
			}, recheck: 20*day + time.Nanosecond},
		{name: "a Secret's tls.crt that is a CA (a cert-manager CA issuer's) is judged as a CA, not a leaf", policy: strict,
			s:    certpolicy.Subject{Cert: func() *certpolicy.Certificate { c := certpolicy.FromX509(rsaRoot.Cert); return &c }()},
			want: []want{{certpolicy.CAKeyAlgorithms, []string{`CA "rsa"`}}}, recheck: 335 * day},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := certpolicy.Policy{CA: tc.policy, MaxValidity: 90 * day} // leaf rules never apply to CAs
			v := certpolicy.Evaluate(p, tc.s, t0)
			checkViolations(t, v.Violations, tc.want)
			if want := timeAt(tc.recheck); !v.Recheck.Equal(want) {
				t.Errorf("recheck %v, want %v", v.Recheck, want)
			}
		})
	}

	t.Run("a bundle past MaxCAs keeps those that expire first and says what it did not judge", func(t *testing.T) {
		var certs []certpolicy.Certificate
		for i := range certpolicy.MaxCAs + 2 {
			c := certpolicy.FromX509(root.Cert)
			c.NotAfter = t0.Add(time.Duration(certpolicy.MaxCAs+2-i) * 100 * day)
			certs = append(certs, c)
		}
		ch := certpolicy.CAChain(certs)
		if len(ch.Certs) != certpolicy.MaxCAs || ch.Count != certpolicy.MaxCAs+2 || !ch.Certs[0].NotAfter.Equal(t0.Add(100*day)) {
			t.Fatalf("chain kept %d of %d, first expires %v", len(ch.Certs), ch.Count, ch.Certs[0].NotAfter)
		}
		v := certpolicy.Evaluate(certpolicy.Policy{CA: &certpolicy.CAPolicy{KeyAlgorithms: []certpolicy.AllowedKey{{Algorithm: certpolicy.ECDSA}}}}, certpolicy.Subject{CAs: ch}, t0)
		checkViolations(t, v.Violations, []want{{certpolicy.CAKeyAlgorithms, []string{"caKeyAlgorithms cannot be checked; 2 of its 10 CA certificates were not judged"}}})
	})
}

func TestDeniesDNSName(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"admin.example.com", "admin.example.com", true},
		{"admin.example.com", "www.example.com", false},
		{"admin.example.com", "*.example.com", true}, // the wildcard covers it
		{"a*.example.com", "*.example.com", true},
		{"**.internal.example.com", "db.internal.example.com", true},
		{"**.internal.example.com", "*.internal.example.com", true},
		{"**.internal.example.com", "internal.example.com", false},
		{"localhost", "LOCALHOST.", true},
		{"*.example.com", "a.b.example.com", false},
	} {
		if got := certpolicy.DeniesDNSName(tc.pattern, tc.name); got != tc.want {
			t.Errorf("DeniesDNSName(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestSelectPodCertificatesAndBundles(t *testing.T) {
	pod := &certpolicy.Facts{ID: certpolicy.ID{Kind: v1alpha1.KindPodCertificateRequest, Namespace: "shop", Name: "req-1"},
		Subject: certpolicy.Subject{Pod: &certpolicy.PodRequest{SignerName: "example.com/mesh", ServiceAccount: "web"}}}
	bundle := &certpolicy.Facts{ID: certpolicy.ID{Kind: v1alpha1.KindClusterTrustBundle, Name: "example.com:mesh:roots"}, SignerName: "example.com/mesh"}
	secret := facts(v1alpha1.KindSecret, "shop", "tls", 0, 90*day, nil)
	shop := labels.Set{"kubernetes.io/metadata.name": "shop"}

	for _, tc := range []struct {
		name              string
		sel               v1alpha1.CertificateSelector
		pod, bundle, leaf bool
	}{
		{name: "no kinds: pod certificates and bundles are not judged", leaf: true},
		{name: "kinds name them", sel: v1alpha1.CertificateSelector{Kinds: []v1alpha1.CertificateKind{v1alpha1.KindPodCertificateRequest, v1alpha1.KindClusterTrustBundle}}, pod: true, bundle: true},
		{name: "signer pattern", sel: v1alpha1.CertificateSelector{Kinds: []v1alpha1.CertificateKind{v1alpha1.KindPodCertificateRequest, v1alpha1.KindClusterTrustBundle, v1alpha1.KindSecret}, SignerNames: []string{"example.com/*"}}, pod: true, bundle: true, leaf: true},
		{name: "another signer", sel: v1alpha1.CertificateSelector{Kinds: []v1alpha1.CertificateKind{v1alpha1.KindPodCertificateRequest, v1alpha1.KindClusterTrustBundle}, SignerNames: []string{"other.io/*"}}},
		{name: "service account", sel: v1alpha1.CertificateSelector{Kinds: []v1alpha1.CertificateKind{v1alpha1.KindPodCertificateRequest}, ServiceAccountNames: []string{"web*"}}, pod: true},
		{name: "another service account", sel: v1alpha1.CertificateSelector{Kinds: []v1alpha1.CertificateKind{v1alpha1.KindPodCertificateRequest}, ServiceAccountNames: []string{"db"}}},
		{name: "namespace selector applies to requests, not to bundles",
			sel: v1alpha1.CertificateSelector{Kinds: []v1alpha1.CertificateKind{v1alpha1.KindPodCertificateRequest, v1alpha1.KindClusterTrustBundle},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "other"}}}, bundle: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := compile(t, policy("p", 1, func(p *v1alpha1.CertificatePolicy) { p.Spec.Selector = tc.sel }))
			if got := c.Selects(pod, shop); got != tc.pod {
				t.Errorf("selects the pod certificate: %v, want %v", got, tc.pod)
			}
			if got := c.Selects(bundle, nil); got != tc.bundle {
				t.Errorf("selects the bundle: %v, want %v", got, tc.bundle)
			}
			if got := c.Selects(secret, shop); got != tc.leaf {
				t.Errorf("selects the Secret: %v, want %v", got, tc.leaf)
			}
		})
	}
}

func TestAggregatePodStates(t *testing.T) {
	store := certpolicy.NewStore()
	st := store.Policy(compile(t, policy("pods", 1, func(p *v1alpha1.CertificatePolicy) {
		p.Spec.Selector.Kinds = []v1alpha1.CertificateKind{v1alpha1.KindPodCertificateRequest}
		p.Spec.Rules.RefreshOverdueAfter = &metav1.Duration{Duration: 30 * time.Minute}
	})))
	judge := func(st *certpolicy.PolicyState, f *certpolicy.Facts) (certpolicy.Verdict, bool) {
		if !st.Compiled.Selects(f, nil) {
			return certpolicy.Verdict{}, false
		}
		return certpolicy.Evaluate(st.Compiled.Rules, f.Subject, t0.Add(16*hour)), true
	}
	store.JudgeAll(st, judge)
	for i, state := range []certpolicy.RequestState{certpolicy.RequestIssued, certpolicy.RequestIssued, certpolicy.RequestDenied, certpolicy.RequestPending} {
		c := &certpolicy.Certificate{NotBefore: t0.Add(-hour), NotAfter: t0.Add(23 * hour)}
		r := &certpolicy.PodRequest{SignerName: "example.com/mesh", State: state, BeginRefreshAt: t0.Add(15 * hour), Superseded: i == 1}
		s := certpolicy.Subject{Pod: r}
		if state == certpolicy.RequestIssued {
			s.Cert = c
		}
		store.Upsert(&certpolicy.Facts{ID: certpolicy.ID{Kind: v1alpha1.KindPodCertificateRequest, Namespace: "shop", Name: string(rune('a' + i))}, Subject: s}, judge)
	}
	a := store.Aggregate(st)
	want := map[certpolicy.PodState]int32{certpolicy.PodOverdueForRefresh: 1, certpolicy.PodFresh: 1, certpolicy.PodDenied: 1, certpolicy.PodPending: 1}
	if !maps.Equal(a.PodStates, want) {
		t.Errorf("pod states %v, want %v", a.PodStates, want)
	}
	status := certpolicy.Status(v1alpha1.CertificatePolicyStatus{}, 1, a, true)
	if got := status.PodCertificates; got == nil || *got != (v1alpha1.PodCertificateStates{Pending: 1, Fresh: 1, OverdueForRefresh: 1, Denied: 1}) {
		t.Errorf("status.podCertificates = %+v", got)
	}
}

// timeAt is t0+d, or zero for 0.
func timeAt(d time.Duration) time.Time {
	if d == 0 {
		return time.Time{}
	}
	return t0.Add(d)
}
