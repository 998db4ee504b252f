package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterKeySourceSpec says how the operator mints keys, and which rings may
// have it do so.
type ClusterKeySourceSpec struct {
	// vault mints keys with HashiCorp Vault's random endpoint.
	// +required
	Vault *VaultSource `json:"vault"`

	// namespaceSelector chooses the namespaces whose TicketKeyRings may mint
	// from this source. When omitted, no TicketKeyRing may: only
	// ClusterTicketKeyRings, which cluster administrators write. {} allows
	// every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// VaultSource mints keys from Vault. Every Secret and ConfigMap it names is
// read from the operator's own namespace (the operator's
// --cluster-resource-namespace), never a ring's.
type VaultSource struct {
	// address is Vault's URL, e.g. https://vault.vault.svc:8200. Only https
	// is accepted; the server's certificate is verified against caBundle (or
	// the operator's system roots) and redirects are not followed. It may
	// not hold credentials (https://user:password@...): it is shown in
	// kubectl get's ADDRESS column; give them in auth.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https://[^\s/?#]+(/[^\s?#]*)?$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[a-z]+://[^/?#]*@')",message="address may not hold credentials (user:password@): give them in auth"
	// +required
	Address string `json:"address"`

	// namespace is the Vault Enterprise namespace to use, if any.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// caBundle names the PEM bundle that Vault's TLS certificate chains to,
	// in a Secret or ConfigMap of the operator's namespace. When omitted,
	// the operator's system roots are used.
	// +optional
	CABundle *CABundleSource `json:"caBundle,omitempty"`

	// randomPath is the Vault endpoint that returns random bytes:
	// sys/tools/random (the default) or a transit mount's random endpoint,
	// such as transit/random. The operator asks it for 32 bytes per key.
	// +kubebuilder:default="sys/tools/random"
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^(sys/tools/random|[a-zA-Z0-9_.-]+(/[a-zA-Z0-9_.-]+)*/random)$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(s, s == '.' || s == '..')",message="randomPath may not hold . or .. segments: it names one Vault endpoint, and Vault would resolve them to another"
	// +optional
	RandomPath string `json:"randomPath,omitempty"`

	// auth is how the operator logs in to Vault: exactly one method.
	// +required
	Auth VaultAuth `json:"auth"`

	// sharedRings, when set, shares rings that name this key source with
	// the other clusters whose key sources name the same location: every
	// ClusterTicketKeyRing, and the TicketKeyRings of the namespaces that
	// sharedRings.namespaceSelector selects. A shared ring's state (its
	// keys, their times, its policy, the requests carried out) lives in a
	// Vault KV v2 entry, and every cluster serves the keys it holds. One
	// cluster writes each rotation, with check-and-set on the version it
	// read; the others adopt it. A TicketKeyRing's entry is
	// <path>/namespaces/<namespace>/<name>, a ClusterTicketKeyRing's
	// <path>/cluster/<name>: whoever owns a namespace of that name in any
	// cluster sharing the path owns the entry, so share a namespace only
	// where its name means the same owner in every such cluster. Each
	// operator reads the entry every activationDelay/4 (between 1s and
	// 30s): a ring's activationDelay must cover that plus delivery to pods
	// in the slowest cluster.
	// +optional
	SharedRings *VaultSharedRings `json:"sharedRings,omitempty"`
}

// VaultSharedRings is where in Vault's KV v2 engine shared rings live.
type VaultSharedRings struct {
	// mount is where the KV version 2 secrets engine is mounted.
	// +kubebuilder:default="secret"
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_.-]+(/[a-zA-Z0-9_.-]+)*$`
	// +optional
	Mount string `json:"mount,omitempty"`

	// path under the mount that holds the rings' entries, e.g.
	// ringmaster/prod. The operator's Vault policy needs nothing beyond it
	// (docs/spec/v1alpha1/clusterkeysources.md, "One ring across clusters").
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_.-]+(/[a-zA-Z0-9_.-]+)*$`
	// +required
	Path string `json:"path"`

	// namespaceSelector chooses the namespaces whose TicketKeyRings are
	// shared across clusters, among those the key source's own
	// spec.namespaceSelector lets mint from it. Sharing hands a ring's live
	// keys to every cluster whose key source names this path, and the
	// entry to whoever owns a namespace of the same name there: select
	// only namespaces whose name means the same owner in every such
	// cluster. When omitted, no TicketKeyRing is shared: TicketKeyRings
	// that name this key source mint from it and keep their keys in their
	// own cluster, and read no entry. {} shares every allowed namespace.
	// ClusterTicketKeyRings, which cluster administrators write, are always
	// shared.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// maxVersions is how many versions Vault keeps of each ring's entry;
	// older ones are removed for good. Versions that hold a key the newest
	// no longer has (an expired or revoked key) are destroyed sooner, as
	// soon as an operator sees the newer version.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxVersions int32 `json:"maxVersions,omitempty"`
}

// CABundleSource names a PEM bundle in a Secret or a ConfigMap of the
// operator's namespace.
// +kubebuilder:validation:XValidation:rule="has(self.secretKeyRef) != has(self.configMapKeyRef)",message="caBundle takes exactly one of secretKeyRef and configMapKeyRef"
type CABundleSource struct {
	// secretKeyRef is a key of a Secret in the operator's namespace.
	// +optional
	SecretKeyRef *KeyRef `json:"secretKeyRef,omitempty"`
	// configMapKeyRef is a key of a ConfigMap in the operator's namespace.
	// +optional
	ConfigMapKeyRef *KeyRef `json:"configMapKeyRef,omitempty"`
}

// KeyRef names one key of a Secret or ConfigMap in the operator's namespace.
type KeyRef struct {
	// name of the Secret or ConfigMap.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
	// key within it.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:MinLength=1
	// +required
	Key string `json:"key"`
}

// VaultAuth is how the operator logs in to Vault.
// +kubebuilder:validation:XValidation:rule="[has(self.kubernetes), has(self.tokenSecretRef), has(self.appRole)].filter(x, x).size() == 1",message="auth takes exactly one of kubernetes, tokenSecretRef and appRole"
type VaultAuth struct {
	// kubernetes logs in with a short-lived token of the operator's own
	// service account, through Vault's Kubernetes auth method.
	// +optional
	Kubernetes *VaultKubernetesAuth `json:"kubernetes,omitempty"`
	// tokenSecretRef names a Secret key holding a Vault token. The operator
	// reads it at each login; renewing it is the token owner's job.
	// +optional
	TokenSecretRef *KeyRef `json:"tokenSecretRef,omitempty"`
	// appRole logs in with Vault's AppRole auth method.
	// +optional
	AppRole *VaultAppRoleAuth `json:"appRole,omitempty"`
}

// VaultKubernetesAuth logs in with a service account token.
type VaultKubernetesAuth struct {
	// role is the Vault role bound to the operator's service account.
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:MinLength=1
	// +required
	Role string `json:"role"`
	// mountPath is where the Kubernetes auth method is mounted, under
	// auth/: one or more path segments, without . or .. segments.
	// +kubebuilder:default="kubernetes"
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_.-]+(/[a-zA-Z0-9_.-]+)*$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.]?(/|$)')",message="mountPath may not hold a . or .. segment"
	// +optional
	MountPath string `json:"mountPath,omitempty"`
	// audience of the token the operator requests for itself, which the
	// Vault role must expect (its audience setting), e.g. "vault". Required:
	// a token without an audience of its own would be accepted by the
	// Kubernetes API server too. The operator refuses to send a token that
	// the API server accepts.
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:MinLength=1
	// +required
	Audience string `json:"audience"`
}

// VaultAppRoleAuth logs in with an AppRole.
type VaultAppRoleAuth struct {
	// roleID is the AppRole's role id.
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:MinLength=1
	// +required
	RoleID string `json:"roleID"`
	// secretIDSecretRef names the Secret key holding the secret id.
	// +required
	SecretIDSecretRef KeyRef `json:"secretIDSecretRef"`
	// mountPath is where the AppRole auth method is mounted, under auth/:
	// one or more path segments, without . or .. segments.
	// +kubebuilder:default="approle"
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_.-]+(/[a-zA-Z0-9_.-]+)*$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.]?(/|$)')",message="mountPath may not hold a . or .. segment"
	// +optional
	MountPath string `json:"mountPath,omitempty"`
}

// ClusterKeySourceStatus is what the operator last saw of the key source.
type ClusterKeySourceStatus struct {
	// conditions: Ready is True when the operator logged in with the source
	// and its token answered; False with a reason (VaultUnavailable,
	// VaultPermissionDenied, VaultBadResponse, VaultConfigInvalid) and a
	// message saying what to fix otherwise.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// lastCheckTime is when the operator last checked the source.
	// +optional
	LastCheckTime *metav1.Time `json:"lastCheckTime,omitempty"`
}

// ClusterKeySource is a key minter that rings name in spec.sourceRef: a
// Vault server, with how to reach it and log in. It holds the operator's
// credentials (or points at them, in the operator's namespace), so it is
// cluster-scoped: cluster administrators write it and say, with its
// namespaceSelector, which namespaces' rings may use it. A ring never
// chooses where the operator's credentials go.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cks,categories=ringmaster
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.vault.address`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterKeySource struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says how keys are minted and which rings may use the source.
	// +required
	Spec ClusterKeySourceSpec `json:"spec"`

	// status is what the operator last saw of the source.
	// +optional
	Status ClusterKeySourceStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterKeySourceList is a list of ClusterKeySources.
type ClusterKeySourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterKeySource `json:"items"`
}

func init() {
	register(&ClusterKeySource{}, &ClusterKeySourceList{})
}
