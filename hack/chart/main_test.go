package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

const roleYAML = `---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ringmaster-manager
rules:
- apiGroups:
  - ""
  resources:
  - namespaces
  verbs:
  - get
- apiGroups:
  - ""
  resources:
  - pods
  verbs:
  - list
  - patch
- apiGroups:
  - ""
  resources:
  - secrets
  verbs:
  - create
  - get
  - list
  - watch
- apiGroups:
  - cert-manager.io
  resources:
  - certificates
  verbs:
  - get
- apiGroups:
  - ringmaster.io
  resources:
  - certificatepolicies
  - ticketkeyrings
  verbs:
  - get
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: ringmaster-manager
  namespace: ringmaster-system
rules:
- apiGroups:
  - ""
  resourceNames:
  - ringmaster
  resources:
  - serviceaccounts/token
  verbs:
  - create
- apiGroups:
  - ""
  resourceNames:
  - ringmaster
  resources:
  - configmaps
  verbs:
  - get
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: ringmaster-manager
  namespace: kube-system
rules:
- apiGroups:
  - ""
  resources:
  - configmaps
  verbs:
  - get
`

func TestRBACTemplate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "role.yaml")
	if err := os.WriteFile(path, []byte(roleYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := rbacTemplate(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		"kind: ClusterRole\nmetadata:\n  name: {{ include \"ringmaster.fullname\" . }}-manager\n",
		"kind: ClusterRoleBinding\n",
		// The operator's namespace becomes the release's.
		"kind: Role\nmetadata:\n  name: {{ include \"ringmaster.fullname\" . }}-manager\n  namespace: {{ .Release.Namespace }}\n",
		"kind: RoleBinding\nmetadata:\n  name: {{ include \"ringmaster.fullname\" . }}-manager\n  namespace: {{ .Release.Namespace }}\n",
		// Any other namespace stays.
		"  namespace: \"kube-system\"\n",
		// The operator's own ServiceAccount becomes the chart's.
		"  resourceNames:\n  - {{ include \"ringmaster.serviceAccountName\" . }}\n  resources:\n  - serviceaccounts/token\n",
		"subjects:\n- kind: ServiceAccount\n  name: {{ include \"ringmaster.serviceAccountName\" . }}\n  namespace: {{ .Release.Namespace }}\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing\n%s\nin\n%s", want, got)
		}
	}
	// Only service account names are the operator's: a ConfigMap named
	// ringmaster keeps its name.
	if !strings.Contains(got, "  resourceNames:\n  - ringmaster\n  resources:\n  - configmaps\n") {
		t.Errorf("a ConfigMap's resourceNames changed:\n%s", got)
	}
	if n := strings.Count(got, "\nkind: "); n != 8 {
		t.Errorf("%d objects, want 3 roles and 3 bindings, and a role and binding per watched namespace", n)
	}

	// The ClusterRole's rules, by class.
	cluster := got[strings.Index(got, "kind: ClusterRole\n"):strings.Index(got, "kind: ClusterRoleBinding\n")]
	for _, want := range []string{
		// Always: namespaces, and the ring kinds split from the CertificatePolicy's.
		"rules:\n- apiGroups:\n  - \"\"\n  resources:\n  - namespaces\n",
		"- apiGroups:\n  - ringmaster.io\n  resources:\n  - ticketkeyrings\n  verbs:\n  - get\n{{- if .Values.certificatePolicy.enabled }}\n",
		// The audit's, behind its switch.
		"{{- if .Values.certificatePolicy.enabled }}\n- apiGroups:\n  - cert-manager.io\n  resources:\n  - certificates\n  verbs:\n  - get\n- apiGroups:\n  - ringmaster.io\n  resources:\n  - certificatepolicies\n  verbs:\n  - get\n{{- end }}\n",
		// Rings' Secrets and pods cluster-wide unless namespaces are listed;
		// then only the audit's reads of Secrets, if it runs.
		// The patch of pods only with nudging under the pods' guard.
		"{{- if not .Values.watchNamespaces }}\n- apiGroups:\n  - \"\"\n  resources:\n  - pods\n  verbs:\n  - list\n- apiGroups:\n  - \"\"\n  resources:\n  - secrets\n  verbs:\n  - create\n  - get\n  - list\n  - watch\n" +
			"{{- if and .Values.nudge.enabled .Values.admissionPolicy.enabled }}\n- apiGroups:\n  - \"\"\n  resources:\n  - pods\n  verbs:\n  - patch\n{{- end }}\n" +
			"{{- else if or .Values.certificatePolicy.enabled .Values.unmanagedTicketKeys.enabled }}\n- apiGroups:\n  - \"\"\n  resources:\n  - secrets\n  verbs:\n  - get\n  - list\n  - watch\n{{- end }}\n",
	} {
		if !strings.Contains(cluster, want) {
			t.Errorf("the ClusterRole misses\n%s\nin\n%s", want, cluster)
		}
	}
	// Under watchNamespaces, rings' Secrets and pods by Roles in each.
	for _, want := range []string{
		"{{- if .Values.watchNamespaces }}\n{{- range $ns := uniq (append .Values.watchNamespaces .Release.Namespace) }}\n---\n",
		"kind: Role\nmetadata:\n  name: {{ include \"ringmaster.fullname\" $ }}-rings\n  namespace: {{ $ns }}\n  labels:\n    {{- include \"ringmaster.labels\" $ | nindent 4 }}\nrules:\n- apiGroups:\n  - \"\"\n  resources:\n  - pods\n",
		"  - list\n  - watch\n{{- if and $.Values.nudge.enabled $.Values.admissionPolicy.enabled }}\n- apiGroups:\n  - \"\"\n  resources:\n  - pods\n  verbs:\n  - patch\n{{- end }}\n---\n",
		"kind: RoleBinding\nmetadata:\n  name: {{ include \"ringmaster.fullname\" $ }}-rings\n  namespace: {{ $ns }}\n",
		"subjects:\n- kind: ServiceAccount\n  name: {{ include \"ringmaster.serviceAccountName\" $ }}\n  namespace: {{ $.Release.Namespace }}\n{{- end }}\n{{- end }}\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing\n%s\nin\n%s", want, got)
		}
	}
}

func TestClassify(t *testing.T) {
	rule := func(group string, verbs []string, resources ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
	}
	get := []string{"get"}
	tests := []struct {
		name                      string
		rules                     []rbacv1.PolicyRule
		always, ring, nudge, cpol int
		unmanaged                 int
	}{
		{"Secrets and pods are the rings'", []rbacv1.PolicyRule{rule("", get, "secrets"), rule("", get, "pods")}, 0, 2, 0, 0, 0},
		{"namespaces are always needed", []rbacv1.PolicyRule{rule("", get, "namespaces")}, 1, 0, 0, 0, 0},
		{"a rule naming ring kinds and CertificatePolicies is split", []rbacv1.PolicyRule{rule("ringmaster.io", get, "certificatepolicies", "ticketkeyrings")}, 1, 0, 0, 1, 0},
		{"cert-manager's Certificates are the audit's", []rbacv1.PolicyRule{rule("cert-manager.io", get, "certificates", "certificates/status")}, 0, 0, 0, 1, 0},
		{"a secrets resource of another group is not the core's", []rbacv1.PolicyRule{rule("example.com", get, "secrets")}, 1, 0, 0, 0, 0},
		{"non-resource URLs are always needed", []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: get}}, 1, 0, 0, 0, 0},
		{"the patch of pods is the nudge's, their reads the rings'", []rbacv1.PolicyRule{rule("", []string{"list", "patch", "watch"}, "pods")}, 0, 1, 1, 0, 0},
		{"the patch of pods alone", []rbacv1.PolicyRule{rule("", []string{"patch"}, "pods")}, 0, 0, 1, 0, 0},
		{"the patch of Secrets is no nudge", []rbacv1.PolicyRule{rule("", []string{"patch"}, "secrets")}, 0, 1, 0, 0, 0},
		{"ConfigMaps and Envoy configurations are the unmanaged ticket keys' audit's", []rbacv1.PolicyRule{rule("", []string{"list"}, "configmaps"), rule("cilium.io", []string{"list"}, "ciliumclusterwideenvoyconfigs", "ciliumenvoyconfigs"), rule("networking.istio.io", []string{"list"}, "envoyfilters")}, 0, 0, 0, 0, 3},
		{"a rule naming Secrets and pods with patch is split three ways", []rbacv1.PolicyRule{rule("", []string{"get", "patch"}, "pods", "secrets")}, 0, 2, 1, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, r, n, c, u := classify(tt.rules)
			if len(a) != tt.always || len(r) != tt.ring || len(n) != tt.nudge || len(c) != tt.cpol || len(u) != tt.unmanaged {
				t.Errorf("classify = %d always, %d ring, %d nudge, %d certificatePolicy, %d unmanagedTicketKeys; want %d, %d, %d, %d, %d", len(a), len(r), len(n), len(c), len(u), tt.always, tt.ring, tt.nudge, tt.cpol, tt.unmanaged)
			}
			for _, x := range r {
				if slices.Contains(x.Resources, "pods") && slices.Contains(x.Verbs, "patch") {
					t.Errorf("the ring class patches pods: %+v", x)
				}
			}
			for _, x := range n {
				if !slices.Equal(x.Resources, []string{"pods"}) || !slices.Equal(x.Verbs, []string{"patch"}) {
					t.Errorf("the nudge class holds %+v, want the patch of pods alone", x)
				}
			}
		})
	}
	if got := secretReads([]rbacv1.PolicyRule{rule("", []string{"create", "delete", "get", "list", "update", "watch"}, "secrets"), rule("", []string{"list"}, "pods")}); len(got) != 1 || strings.Join(got[0].Verbs, ",") != "get,list,watch" {
		t.Errorf("secretReads = %+v, want get, list and watch of secrets alone", got)
	}
}

func TestCRDTemplate(t *testing.T) {
	dir := t.TempDir()
	crd := "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  annotations:\n    controller-gen.kubebuilder.io/version: v0.23.0\n  name: things.ringmaster.io\nspec:\n  group: ringmaster.io\n"
	path := filepath.Join(dir, "ringmaster.io_things.yaml")
	if err := os.WriteFile(path, []byte(crd), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := crdTemplate(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		"{{- if .Values.crds.enabled }}\n",
		"  name: \"things.ringmaster.io\"\n",
		"    controller-gen.kubebuilder.io/version: \"v0.23.0\"\n    {{- if .Values.crds.keep }}\n    helm.sh/resource-policy: keep\n    {{- end }}\n",
		"spec:\n  group: ringmaster.io\n{{- end }}\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing\n%s\nin\n%s", want, got)
		}
	}

	if err := os.WriteFile(path, []byte(crd+"  description: '{{ x }}'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := crdTemplate(path); err == nil {
		t.Error("a CRD holding {{ was accepted")
	}
}

// policyDoc and bindingDoc are the least admission guard the generator
// takes.
const (
	policyDoc  = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: ringmaster-x\nspec:\n  variables:\n  - name: operatorNamespace\n    expression: \"'ringmaster-system'\"\n  - name: operatorServiceAccount\n    expression: \"'ringmaster'\"\n"
	bindingDoc = "---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: ringmaster-x\nspec:\n  policyName: ringmaster-x\n"
)

func TestAdmissionTemplate(t *testing.T) {
	out, err := admissionTemplate(filepath.Join("..", "..", "config", "admission", "policy.yaml"), ".Values.admissionPolicy.enabled")
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		"{{- if .Values.admissionPolicy.enabled }}\n",
		"kind: ValidatingAdmissionPolicy\nmetadata:\n  name: {{ include \"ringmaster.fullname\" . }}-secrets\n  labels:\n    {{- include \"ringmaster.labels\" . | nindent 4 }}\nspec:\n",
		"kind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: {{ include \"ringmaster.fullname\" . }}-secrets\n",
		"  policyName: {{ include \"ringmaster.fullname\" . }}-secrets\n",
		// The operator is the chart's service account, in the release namespace.
		"- name: operatorNamespace\n    expression: \"'{{ .Release.Namespace }}'\"\n",
		"- name: operatorServiceAccount\n    expression: \"'{{ include \"ringmaster.serviceAccountName\" . }}'\"\n",
		// The messages name the release's policy.
		"'{{ include \"ringmaster.fullname\" . }}-secrets: only the ringmaster operator (' + variables.operatorUser",
		"\n{{- end }}\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing\n%s\nin\n%s", want, got)
		}
	}
	for _, gone := range []string{"ringmaster-system", "name: ringmaster-secrets", "'ringmaster-secrets:"} {
		if strings.Contains(got, gone) {
			t.Errorf("%q left in\n%s", gone, got)
		}
	}

	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(policyDoc+bindingDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := admissionTemplate(good, ".Values.admissionPolicy.enabled"); err != nil {
		t.Fatalf("the least guard: %v", err)
	}
	for name, doc := range map[string]string{
		"templated":   policyDoc + "  x: '{{ y }}'\n",
		"no operator": "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: ringmaster-x\n",
		"no binding":  policyDoc,
		"the operator named outside the variables": policyDoc + "  - name: other\n    expression: \"request.userInfo.username == 'system:serviceaccount:ringmaster-system:ringmaster'\"\n" + bindingDoc,
		"the operator named twice":                 policyDoc + "  - name: operatorNamespace\n    expression: \"'ringmaster-system'\"\n" + bindingDoc,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := admissionTemplate(path, ".Values.admissionPolicy.enabled"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestPodAdmissionTemplate(t *testing.T) {
	out, err := admissionTemplate(filepath.Join("..", "..", "config", "admission", "pods.yaml"), nudging)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		// Installed with nudging alone, which needs the guard.
		"{{- if and .Values.nudge.enabled .Values.admissionPolicy.enabled }}\n",
		"kind: ValidatingAdmissionPolicy\nmetadata:\n  name: {{ include \"ringmaster.fullname\" . }}-pods\n",
		"kind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: {{ include \"ringmaster.fullname\" . }}-pods\n",
		"  policyName: {{ include \"ringmaster.fullname\" . }}-pods\n",
		"- name: operatorNamespace\n    expression: \"'{{ .Release.Namespace }}'\"\n",
		"- name: operatorServiceAccount\n    expression: \"'{{ include \"ringmaster.serviceAccountName\" . }}'\"\n",
		"'{{ include \"ringmaster.fullname\" . }}-pods: the ringmaster operator (' + variables.operatorUser",
		"'ringmaster.io/delivered'",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing\n%s\nin\n%s", want, got)
		}
	}
	for _, gone := range []string{"ringmaster-system", "name: ringmaster-pods", "'ringmaster-pods:"} {
		if strings.Contains(got, gone) {
			t.Errorf("%q left in\n%s", gone, got)
		}
	}
}
