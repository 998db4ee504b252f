package ticketkeys

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// FromConfigMap is what the finder reads of a ConfigMap: data and
// binaryData alike.
func FromConfigMap(cm *corev1.ConfigMap) Object {
	o := meta(KindConfigMap, "", cm.Namespace, cm.Name, cm.Labels)
	o.Created, o.ManagedFields = cm.CreationTimestamp.Time, cm.ManagedFields
	o.Data = make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		o.Data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		o.Data[k] = v
	}
	return o
}

// FromSecret is what the finder reads of a Secret.
func FromSecret(s *corev1.Secret) Object {
	o := meta(KindSecret, "", s.Namespace, s.Name, s.Labels)
	o.Type, o.Created, o.ManagedFields, o.Data = string(s.Type), s.CreationTimestamp.Time, s.ManagedFields, s.Data
	return o
}

// FromUnstructured is what the finder reads of a custom resource: its
// spec.
func FromUnstructured(u *unstructured.Unstructured) Object {
	gvk := u.GroupVersionKind()
	o := meta(gvk.Kind, gvk.Group, u.GetNamespace(), u.GetName(), u.GetLabels())
	o.Created, o.ManagedFields = u.GetCreationTimestamp().Time, u.GetManagedFields()
	o.Spec, _ = u.Object["spec"].(map[string]any)
	return o
}

func meta(kind, group, ns, name string, labels map[string]string) Object {
	return Object{Kind: kind, Group: group, Namespace: ns, Name: name, Labels: labels}
}
