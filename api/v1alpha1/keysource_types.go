package v1alpha1

// Condition types and reasons of a key source.
const (
	// ConditionRotationOverdue is True while a rotation is due but its key
	// cannot be minted. Keys still expire on time meanwhile: forward secrecy
	// comes before resumption.
	ConditionRotationOverdue = "RotationOverdue"

	// ReasonVaultUnavailable: Vault could not be reached or answered 5xx.
	ReasonVaultUnavailable = "VaultUnavailable"
	// ReasonVaultPermissionDenied: Vault refused the login or the request.
	ReasonVaultPermissionDenied = "VaultPermissionDenied"
	// ReasonVaultBadResponse: Vault answered something that is not a fresh
	// 32-byte key.
	ReasonVaultBadResponse = "VaultBadResponse"
	// ReasonVaultConfig: the Vault settings or a Secret they reference are
	// missing or invalid.
	ReasonVaultConfig = "VaultConfigInvalid"
	// ReasonOnSchedule: no rotation is overdue.
	ReasonOnSchedule = "OnSchedule"
)

// KeySource says where a ring's keys are minted.
type KeySource struct {
	// vault mints keys with HashiCorp Vault's random endpoint. When omitted,
	// the operator mints keys in-cluster from crypto/rand.
	// +optional
	Vault *VaultSource `json:"vault,omitempty"`
}

// VaultSource mints keys from Vault.
type VaultSource struct {
	// address is Vault's URL, e.g. https://vault.vault.svc:8200.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +required
	Address string `json:"address"`

	// namespace is the Vault Enterprise namespace to use, if any.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// caBundle names the PEM bundle that Vault's TLS certificate chains to,
	// in a Secret or ConfigMap of the ring's namespace. When omitted, the
	// operator's system roots are used.
	// +optional
	CABundle *CABundleSource `json:"caBundle,omitempty"`

	// randomPath is the Vault endpoint that returns random bytes:
	// sys/tools/random (the default) or a transit mount's random endpoint,
	// such as transit/random. The operator asks it for 32 bytes per key.
	// +kubebuilder:default="sys/tools/random"
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^(sys/tools/random|[a-zA-Z0-9_.-]+(/[a-zA-Z0-9_.-]+)*/random)$`
	// +optional
	RandomPath string `json:"randomPath,omitempty"`

	// auth is how the operator logs in to Vault: exactly one method.
	// +required
	Auth VaultAuth `json:"auth"`
}

// CABundleSource names a PEM bundle in a Secret or a ConfigMap.
// +kubebuilder:validation:XValidation:rule="has(self.secretKeyRef) != has(self.configMapKeyRef)",message="caBundle takes exactly one of secretKeyRef and configMapKeyRef"
type CABundleSource struct {
	// secretKeyRef is a key of a Secret in the ring's namespace.
	// +optional
	SecretKeyRef *KeyRef `json:"secretKeyRef,omitempty"`
	// configMapKeyRef is a key of a ConfigMap in the ring's namespace.
	// +optional
	ConfigMapKeyRef *KeyRef `json:"configMapKeyRef,omitempty"`
}

// KeyRef names one key of a Secret or ConfigMap in the ring's namespace.
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
	// kubernetes logs in with the operator's service account token, through
	// Vault's Kubernetes auth method.
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
	// mountPath is where the Kubernetes auth method is mounted.
	// +kubebuilder:default="kubernetes"
	// +kubebuilder:validation:MaxLength=255
	// +optional
	MountPath string `json:"mountPath,omitempty"`
	// audience is the audience of the token the operator requests for
	// itself; it must match the role's audience, if the role sets one.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Audience string `json:"audience,omitempty"`
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
	// mountPath is where the AppRole auth method is mounted.
	// +kubebuilder:default="approle"
	// +kubebuilder:validation:MaxLength=255
	// +optional
	MountPath string `json:"mountPath,omitempty"`
}
