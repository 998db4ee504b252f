package certificatepolicy

import (
	"context"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ringmaster-io/ringmaster/api/v1alpha1"
	"github.com/ringmaster-io/ringmaster/internal/certpolicy"
	"github.com/ringmaster-io/ringmaster/internal/shape"
)

// +kubebuilder:rbac:groups=certificates.k8s.io,resources=podcertificaterequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=clustertrustbundles,verbs=get;list;watch

// Observing pod certificates (PodCertificateRequests) and trust bundles
// (ClusterTrustBundles).
//
// kube-controller-manager deletes every PodCertificateRequest 15 minutes
// after it was made, long before its certificate needs refreshing, so a
// pod's certificate outlives its request: the operator keeps the facts of
// the last request issued for each pod and signer after the request is
// gone, for as long as its pod lives, until a newer request replaces it.
// Whether the pod lives is asked when the request goes and every
// retainedRecheck after, with a list of one pod's metadata.

// retainedRecheck is how often the operator asks whether the pod of a pod
// certificate whose request is gone still lives.
const retainedRecheck = 15 * time.Minute

// podSigner names a pod's certificates from one signer: a new request of
// the same pod and signer replaces the last.
type podSigner struct {
	Namespace, PodUID, Signer string
}

// podIssued is the newest issued request of a pod and signer.
type podIssued struct {
	Name    string
	Created time.Time
}

func podSignerOf(ns string, r *certpolicy.PodRequest) podSigner {
	return podSigner{Namespace: ns, PodUID: r.PodUID, Signer: r.SignerName}
}

// observePodRequest records the facts of a PodCertificateRequest and
// judges it against every policy; a request gone from the API stays judged
// while it holds its pod's certificate.
func (r *Reconciler) observePodRequest(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	id := certpolicy.ID{Kind: v1alpha1.KindPodCertificateRequest, Namespace: key.Namespace, Name: key.Name}
	pcr := &certificatesv1.PodCertificateRequest{}
	if err := r.Get(ctx, key, pcr); err != nil {
		if apierrors.IsNotFound(err) {
			return r.requestGone(ctx, id)
		}
		return 0, err
	}
	reading, err := shape.PodReadingOf(pcr)
	if err != nil {
		reading = certpolicy.PodReading{Error: err.Error(), Request: certpolicy.PodRequest{State: certpolicy.RequestPending}}
	}
	f := &certpolicy.Facts{ID: id}
	ps := podSignerOf(key.Namespace, &reading.Request)
	superseded := false
	if reading.Request.State == certpolicy.RequestIssued {
		newest, ok := r.newestIssued[ps]
		switch {
		case !ok || newer(pcr.CreationTimestamp.Time, pcr.Name, newest):
			r.newestIssued[ps] = podIssued{Name: pcr.Name, Created: pcr.CreationTimestamp.Time}
			if ok && newest.Name != pcr.Name {
				r.supersede(ctx, certpolicy.ID{Kind: v1alpha1.KindPodCertificateRequest, Namespace: key.Namespace, Name: newest.Name})
			}
		default:
			superseded = newest.Name != pcr.Name
		}
	}
	f.Subject = reading.Subject(superseded)
	r.observe(ctx, f)
	return 0, nil
}

// newer reports whether a request made at created, named name, is newer
// than n.
func newer(created time.Time, name string, n podIssued) bool {
	return created.After(n.Created) || (created.Equal(n.Created) && name > n.Name)
}

// supersede marks a request no longer its pod's certificate: a request
// gone from the API is forgotten; one still there is judged again as
// superseded (never overdue for refresh).
func (r *Reconciler) supersede(ctx context.Context, id certpolicy.ID) {
	f := r.store.Facts(id)
	if f == nil || f.Subject.Pod == nil {
		return
	}
	if r.retained[id] {
		delete(r.retained, id)
		r.forget(ctx, id)
		return
	}
	g := *f
	pod := *f.Subject.Pod
	pod.Superseded = true
	g.Subject.Pod = &pod
	r.observe(ctx, &g)
}

// requestGone keeps judging an issued request that is gone from the API
// while it holds the certificate of a pod that lives, and forgets it
// otherwise. It returns when to ask again.
func (r *Reconciler) requestGone(ctx context.Context, id certpolicy.ID) (time.Duration, error) {
	f := r.store.Facts(id)
	if f == nil || f.Subject.Pod == nil || f.Subject.Pod.Superseded || f.Subject.Pod.State != certpolicy.RequestIssued {
		r.forgetRequest(ctx, id, f)
		return 0, nil
	}
	lives, err := r.podLives(ctx, id.Namespace, f.Subject.Pod)
	if err != nil {
		return 0, err
	}
	if !lives {
		r.forgetRequest(ctx, id, f)
		return 0, nil
	}
	if !r.retained[id] {
		log.FromContext(ctx).V(1).Info("Kept a pod certificate whose request is gone", "pod", f.Subject.Pod.PodName, "signer", f.Subject.Pod.SignerName)
	}
	r.retained[id] = true
	return retainedRecheck, nil
}

func (r *Reconciler) forgetRequest(ctx context.Context, id certpolicy.ID, f *certpolicy.Facts) {
	delete(r.retained, id)
	if f != nil && f.Subject.Pod != nil {
		ps := podSignerOf(id.Namespace, f.Subject.Pod)
		if n, ok := r.newestIssued[ps]; ok && n.Name == id.Name {
			delete(r.newestIssued, ps)
		}
	}
	r.forget(ctx, id)
}

// podLives reports whether the pod of a request still runs: a pod of its
// name and UID exists. A pod the operator may not list is taken as gone,
// so that nothing is kept of it.
func (r *Reconciler) podLives(ctx context.Context, ns string, req *certpolicy.PodRequest) (bool, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	err := r.APIReader.List(ctx, list, client.InNamespace(ns), client.MatchingFields{"metadata.name": req.PodName})
	if apierrors.IsForbidden(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up pod %s/%s: %w", ns, req.PodName, err)
	}
	for _, p := range list.Items {
		if string(p.UID) == req.PodUID && p.DeletionTimestamp.IsZero() {
			return true, nil
		}
	}
	return false, nil
}

// observeBundle records the facts of a ClusterTrustBundle, and judges its
// certificates, as CAs, against every policy.
func (r *Reconciler) observeBundle(ctx context.Context, name string) error {
	id := certpolicy.ID{Kind: v1alpha1.KindClusterTrustBundle, Name: name}
	b := &certificatesv1.ClusterTrustBundle{}
	if err := r.Get(ctx, types.NamespacedName{Name: name}, b); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(ctx, id)
			return nil
		}
		return err
	}
	facts := shape.BundleFactsOf(b)
	r.observe(ctx, &certpolicy.Facts{ID: id, Labels: b.Labels, SignerName: b.Spec.SignerName,
		Subject: certpolicy.Subject{CAs: facts.CAs, ReadError: facts.Error}})
	return nil
}

// requestsOfPodRequest: a PodCertificateRequest changed; judge it.
func (r *Reconciler) requestsOfPodRequest(_ context.Context, p *certificatesv1.PodCertificateRequest) []cpolRequest {
	return []cpolRequest{certificateRequest(certpolicy.ID{Kind: v1alpha1.KindPodCertificateRequest, Namespace: p.Namespace, Name: p.Name})}
}

// requestsOfBundle: a ClusterTrustBundle changed; judge it.
func (r *Reconciler) requestsOfBundle(_ context.Context, b *certificatesv1.ClusterTrustBundle) []cpolRequest {
	return []cpolRequest{certificateRequest(certpolicy.ID{Kind: v1alpha1.KindClusterTrustBundle, Name: b.Name})}
}
