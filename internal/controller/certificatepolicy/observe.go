package certificatepolicy

import (
	"context"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

// Observing certificates: reading a TLS Secret or a cert-manager
// Certificate into facts, and judging them against every policy.

// observeSecret records the facts of a kubernetes.io/tls Secret that no
// Certificate manages, and judges it against every policy. A Secret that a
// Certificate manages is judged as that Certificate.
func (r *Reconciler) observeSecret(ctx context.Context, key types.NamespacedName) error {
	id := certpolicy.ID{Kind: v1alpha1.KindSecret, Namespace: key.Namespace, Name: key.Name}
	if !r.WatchingSecrets() {
		return nil // no policy yet: watchSecrets observes it when one comes
	}
	secret := &corev1.Secret{}
	if err := r.SecretCache.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(ctx, id)
			return nil
		}
		return err
	}
	managed, err := r.managedByCertificate(ctx, secret)
	if err != nil {
		return err
	}
	if managed {
		r.forget(ctx, id)
		return nil
	}
	f := &certpolicy.Facts{ID: id, Labels: secret.Labels, Issuer: certpolicy.IssuerOfSecret(secret.Annotations)}
	f.Subject = r.readCertificate(id, secret, nil)
	r.observe(ctx, f)
	return nil
}

// managedByCertificate reports whether a Certificate names the Secret as its
// spec.secretName; cert-manager annotates the Secrets it writes with the
// Certificate's name.
func (r *Reconciler) managedByCertificate(ctx context.Context, s *corev1.Secret) (bool, error) {
	key, ok := certpolicy.CertificateOfSecret(s.Namespace, s.Annotations)
	if !ok || !*r.WatchCertificates {
		return false, nil
	}
	crt := &cmapi.Certificate{}
	if err := r.Get(ctx, key, crt); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return certpolicy.Manages(crt, s.Name), nil
}

// observeCertificate records the facts of a cert-manager Certificate and of
// the certificate in its Secret, and judges it against every policy.
func (r *Reconciler) observeCertificate(ctx context.Context, key types.NamespacedName) error {
	id := certpolicy.ID{Kind: v1alpha1.KindCertificate, Namespace: key.Namespace, Name: key.Name}
	crt := &cmapi.Certificate{}
	if err := r.Get(ctx, key, crt); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(ctx, id)
			return nil
		}
		return err
	}
	if !crt.DeletionTimestamp.IsZero() {
		r.forget(ctx, id)
		return nil
	}
	f := certpolicy.CertificateFacts(crt)
	secret := &corev1.Secret{}
	var err error = apierrors.NewNotFound(corev1.Resource("secrets"), crt.Spec.SecretName)
	if r.WatchingSecrets() {
		// Before the first policy the Secret is not read: watchSecrets
		// observes the Certificate again with it.
		err = r.SecretCache.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: crt.Spec.SecretName}, secret)
	}
	switch {
	case apierrors.IsNotFound(err):
		r.store.Ledger.Release(id.String()) // not issued yet
	case err != nil:
		return err
	default:
		f.Subject = r.readCertificate(id, secret, f.Subject.CertManager)
	}
	f.Current = certpolicy.IsCurrent(crt, f.Subject.Cert)
	r.observe(ctx, f)
	return nil
}

// readCertificate reads the facts the TLS Secret cache parsed from a
// Secret's tls.crt (shape.TLSSecret), and dates its key, as
// certpolicy.Ledger.Read does from the certificate itself.
func (r *Reconciler) readCertificate(id certpolicy.ID, secret *corev1.Secret, cm *certpolicy.CertManager) certpolicy.Subject {
	s := certpolicy.Subject{CertManager: cm}
	facts := shape.FactsOf(secret)
	if facts.Cert == nil {
		s.ReadError = fmt.Sprintf("Secret %s/%s: %s: %s", secret.Namespace, secret.Name, corev1.TLSCertKey, facts.Error)
		r.store.Ledger.Release(id.String())
		return s
	}
	s.Cert, s.CAs = facts.Cert, facts.CAs
	s.KeySince = certpolicy.KeySince(*facts.Cert, cm, r.store.Ledger.Observe(id.String(), *facts.Cert))
	return s
}

// observe stores new facts, judges them against every policy, and has each
// policy whose verdict changed aggregated again.
func (r *Reconciler) observe(ctx context.Context, f *certpolicy.Facts) {
	changed := r.store.Upsert(f, r.judge(ctx, r.Clock.Now()))
	r.enqueuePolicies(ctx, changed)
}

// judge judges certificates as of now, reading each namespace's labels once.
func (r *Reconciler) judge(ctx context.Context, now time.Time) certpolicy.Judge {
	nsLabels := map[string]labels.Set{}
	return func(st *certpolicy.PolicyState, f *certpolicy.Facts) (certpolicy.Verdict, bool) {
		set, ok := nsLabels[f.ID.Namespace]
		if !ok && f.ID.Namespace != "" { // a ClusterTrustBundle has none
			set = r.namespaceLabels(ctx, f.ID.Namespace)
			nsLabels[f.ID.Namespace] = set
		}
		if !st.Compiled.Selects(f, set) {
			return certpolicy.Verdict{}, false
		}
		r.metrics.evaluations.Inc()
		return certpolicy.Evaluate(st.Compiled.Rules, f.Subject, now), true
	}
}

// forget removes a certificate that is gone, or now judged as another kind.
func (r *Reconciler) forget(ctx context.Context, id certpolicy.ID) {
	r.store.Ledger.Release(id.String())
	r.renewals.Forget(id)
	r.enqueuePolicies(ctx, r.store.Remove(id))
}

// enqueuePolicies has policies aggregated again, after aggregateDelay.
func (r *Reconciler) enqueuePolicies(ctx context.Context, names []string) {
	for _, n := range names {
		select {
		case r.policies <- event.TypedGenericEvent[string]{Object: n}:
		case <-ctx.Done(): // shutting down: nobody reads the channel any more
			return
		}
	}
}

func (r *Reconciler) namespaceLabels(ctx context.Context, name string) labels.Set {
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: name}, ns); err != nil {
		log.FromContext(ctx).V(1).Info("Namespace not readable; judged as unlabelled", "namespace", name, "error", err.Error())
		return labels.Set{}
	}
	return ns.Labels
}
