package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ringmaster-io/ringmaster/cmd/kubectl-ringmaster/internal/audit"
)

// secretsPage bounds how many Secrets one list request returns.
const secretsPage = 250

// listTLSSecrets lists the kubernetes.io/tls Secrets of a namespace (all
// when ns is empty), page by page, keeping of each only what the audit
// reads: the API serves a Secret whole, so the response is decoded into a
// narrow type (tlsSecretList) that never decodes tls.key.
func listTLSSecrets(ctx context.Context, rc rest.Interface, ns string) ([]audit.TLSSecret, error) {
	opts := &metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS)).String(),
		Limit:         secretsPage,
	}
	var out []audit.TLSSecret
	for {
		page, err := listTLSSecretsPage(ctx, rc, ns, opts)
		if err != nil {
			return nil, err
		}
		for _, s := range page.Items {
			out = append(out, audit.TLSSecret{
				Namespace: s.Metadata.Namespace, Name: s.Metadata.Name,
				Labels: s.Metadata.Labels, Annotations: s.Metadata.Annotations, Cert: s.Data.Cert,
			})
		}
		if page.Metadata.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Metadata.Continue
	}
}

func listTLSSecretsPage(ctx context.Context, rc rest.Interface, ns string, opts *metav1.ListOptions) (*tlsSecretList, error) {
	body, err := rc.Get().Namespace(ns).Resource("secrets").
		VersionedParams(opts, scheme.ParameterCodec).
		SetHeader("Accept", "application/json").
		Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	page := &tlsSecretList{}
	if err := json.NewDecoder(body).Decode(page); err != nil {
		return nil, fmt.Errorf("decode the list of Secrets: %w", err)
	}
	return page, nil
}

// tlsSecretList is a SecretList decoded narrowly. encoding/json skips the
// keys a struct does not name without decoding their values: of data, only
// tls.crt is decoded, never tls.key.
type tlsSecretList struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []struct {
		Metadata struct {
			Name        string                 `json:"name"`
			Namespace   string                 `json:"namespace"`
			Labels      map[string]string      `json:"labels"`
			Annotations certManagerAnnotations `json:"annotations"`
		} `json:"metadata"`
		Data struct {
			Cert []byte `json:"tls.crt"`
		} `json:"data"`
	} `json:"items"`
}

// certManagerAnnotations are a Secret's cert-manager.io/ annotations. The
// others are skipped undecoded: kubectl apply's last-applied-configuration
// annotation holds the whole Secret it applied, tls.key included.
type certManagerAnnotations map[string]string

// UnmarshalJSON implements json.Unmarshaler.
func (a *certManagerAnnotations) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil {
		return fmt.Errorf("annotations: %w", err)
	} else if t != json.Delim('{') {
		return fmt.Errorf("annotations: want an object, got %v", t)
	}
	out := certManagerAnnotations{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := t.(string)
		if !strings.HasPrefix(key, "cert-manager.io/") {
			if err := dec.Decode(&skipped{}); err != nil {
				return err
			}
			continue
		}
		var v string
		if err := dec.Decode(&v); err != nil {
			return err
		}
		out[key] = v
	}
	*a = out
	return nil
}

// skipped is a JSON value read past and never decoded.
type skipped struct{}

// UnmarshalJSON implements json.Unmarshaler: it ignores the value.
func (*skipped) UnmarshalJSON([]byte) error { return nil }
