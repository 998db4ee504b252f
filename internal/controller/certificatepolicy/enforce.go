package certificatepolicy

import (
	"context"
	"fmt"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
	"github.com/ringmaster-io/ringmaster/internal/controller/apply"
)

// Enforcing a policy: re-issuing what a renewal mends, within the
// cluster-wide rate limit, and saying once what it cannot mend.

// enforce has cert-manager re-issue the violating Certificates that
// re-issuing mends, and reports once what it cannot mend. It returns when to
// try again the renewals the rate limit held back.
func (r *Reconciler) enforce(ctx context.Context, policy *v1alpha1.CertificatePolicy, state *certpolicy.PolicyState, now time.Time) (time.Duration, error) {
	var retry time.Duration
	for _, id := range r.store.Violating(state) {
		f, v := r.store.Get(id, state)
		if f == nil {
			continue
		}
		remedy := certpolicy.Decide(state.Compiled.Rules, f.Subject, v)
		cannot := remedy.Cannot
		if remedy.Renew {
			why, renew := r.renewals.Decide(state.Compiled.Rules, f, remedy, now)
			if why != "" {
				cannot = append(cannot, certpolicy.Violation{Rule: remedy.Mends[0], Message: why})
			}
			if renew {
				if d := r.reserve(now); d > 0 {
					retry = minPositive(retry, d)
					continue
				}
				if err := r.renew(ctx, policy, f, remedy, now); err != nil {
					return 0, err
				}
			}
		}
		if note, report := r.renewals.Report(policy.Name, id, cannot); report {
			r.reportCannot(policy, id, note)
		}
	}
	r.renewals.Resolved(policy.Name, func(id certpolicy.ID) bool {
		_, v := r.store.Get(id, state)
		return len(v.Violations) > 0
	})
	return retry, nil
}

// reserve takes a renewal from the rate limit, or says how long to wait.
func (r *Reconciler) reserve(now time.Time) time.Duration {
	res := r.limiter.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d
	}
	return 0
}

// renew sets the Certificate's Issuing condition, as `cmctl renew` does, with
// a reason and message naming the policy and the rules.
func (r *Reconciler) renew(ctx context.Context, policy *v1alpha1.CertificatePolicy, f *certpolicy.Facts, remedy certpolicy.Remedy, now time.Time) error {
	crt := &cmapi.Certificate{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: f.ID.Namespace, Name: f.ID.Name}, crt); err != nil {
		return client.IgnoreNotFound(err)
	}
	if certpolicy.IsIssuing(crt) {
		return nil // already issuing: the cache was behind
	}
	rules := make([]string, len(remedy.Mends))
	for i, m := range remedy.Mends {
		rules[i] = string(m)
	}
	msg := fmt.Sprintf("Re-issuance triggered by CertificatePolicy %s: breaks %s", policy.Name, strings.Join(rules, ", "))
	certpolicy.SetIssuing(crt, msg, metav1.NewTime(now))
	if err := r.Status().Update(ctx, crt, client.FieldOwner(apply.FieldOwner)); err != nil {
		return fmt.Errorf("set Issuing on Certificate %s: %w", f.ID, err)
	}
	r.renewals.Asked(f.ID, f.Revision, remedy.Mends, now)
	f.Issuing = true
	r.metrics.renewals.WithLabelValues(policy.Name).Inc()
	log.FromContext(ctx).Info("Triggered re-issuance", "certificate", klog.KRef(f.ID.Namespace, f.ID.Name), "rules", rules)
	r.Recorder.Eventf(crt, policy, corev1.EventTypeNormal, v1alpha1.ReasonRenewalTriggered, "Renew", "%s", msg)
	r.Recorder.Eventf(policy, crt, corev1.EventTypeNormal, v1alpha1.ReasonRenewalTriggered, "Renew",
		"Re-issuing Certificate %s/%s: breaks %s", f.ID.Namespace, f.ID.Name, strings.Join(rules, ", "))
	return nil
}

// reportCannot emits one Warning event, on the certificate's object and on
// the policy, saying what Enforce cannot mend about it.
func (r *Reconciler) reportCannot(policy *v1alpha1.CertificatePolicy, id certpolicy.ID, note string) {
	var regarding client.Object = &cmapi.Certificate{}
	if id.Kind == v1alpha1.KindSecret {
		regarding = &corev1.Secret{}
	}
	key := types.NamespacedName{Namespace: id.Namespace, Name: id.Name}
	var reader client.Reader = r.Client
	if id.Kind == v1alpha1.KindSecret {
		reader = r.SecretCache
	}
	if err := reader.Get(context.Background(), key, regarding); err != nil {
		return // gone meanwhile: nothing to attach the event to
	}
	r.Recorder.Eventf(regarding, policy, corev1.EventTypeWarning, v1alpha1.ReasonCannotEnforce, "Enforce", "CertificatePolicy %s cannot mend this: %s", policy.Name, note)
	r.Recorder.Eventf(policy, regarding, corev1.EventTypeWarning, v1alpha1.ReasonCannotEnforce, "Enforce", "%s %s/%s: %s", id.Kind, id.Namespace, id.Name, note)
}

func minPositive(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}
