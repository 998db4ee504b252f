package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ringmaster-io/ringmaster/test/e2e/fleet"
)

// The paths the samples mount their volumes at.
const (
	sampleVolume = "/var/run/ringmaster"
	sampleShared = "/var/run/ringmaster-server"
)

// TestSampleShape checks the example Deployments of config/samples: a
// projected volume without subPath, an emptyDir shared with a native
// sidecar whose probes are its endpoints, shareProcessNamespace for nginx,
// restricted security contexts. TestSampleDeployments runs them.
func TestSampleShape(t *testing.T) {
	for _, s := range samples {
		t.Run(string(s.kind), func(t *testing.T) {
			cm, dep := readSample(t, s.file)
			checkSampleShape(t, s.kind, dep.Spec.Template.Spec)
			if _, ok := cm.Data[s.configFile]; !ok {
				t.Errorf("ConfigMap %s has no %s", cm.Name, s.configFile)
			}
		})
	}
}

// samples are the example Deployments, their server, the file of their
// ConfigMap the server reads, and its listen directive.
var samples = []struct {
	kind             fleet.ServerKind
	file, configFile string
	listen           string
}{
	{fleet.Nginx, "nginx_ringmaster-agent.yaml", "nginx.conf", "listen 8443"},
	{fleet.HAProxy, "haproxy_ringmaster-agent.yaml", "haproxy.cfg", "bind :8443"},
}

func readSample(t *testing.T, name string) (*corev1.ConfigMap, *appsv1.Deployment) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	var cm *corev1.ConfigMap
	var dep *appsv1.Deployment
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		doc += "\n" // the split took the newline that ends the document
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ConfigMap":
			cm = &corev1.ConfigMap{}
			err = yaml.UnmarshalStrict([]byte(doc), cm)
		case "Deployment":
			dep = &appsv1.Deployment{}
			err = yaml.UnmarshalStrict([]byte(doc), dep)
		default:
			t.Fatalf("%s: unexpected kind %q", name, meta.Kind)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if cm == nil || dep == nil {
		t.Fatalf("%s: want a ConfigMap and a Deployment", name)
	}
	return cm, dep
}

func checkSampleShape(t *testing.T, kind fleet.ServerKind, spec corev1.PodSpec) {
	t.Helper()
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("want the sidecar as the one init container, and the server: %d and %d", len(spec.InitContainers), len(spec.Containers))
	}
	side, srv := spec.InitContainers[0], spec.Containers[0]
	if side.RestartPolicy == nil || *side.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the sidecar is not a native sidecar (restartPolicy: Always)")
	}
	if !slices.Contains(side.Args, "--server="+string(kind)) || !slices.Contains(side.Args, "--out-dir="+sampleShared) || !slices.Contains(side.Args, "--dir="+sampleVolume) {
		t.Errorf("sidecar args %q", side.Args)
	}
	for probe, path := range map[*corev1.Probe]string{side.StartupProbe: "/healthz", side.ReadinessProbe: "/readyz", side.LivenessProbe: "/healthz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path {
			t.Errorf("a probe of the sidecar is not on %s: %+v", path, probe)
		}
	}
	if kind == fleet.Nginx && (spec.ShareProcessNamespace == nil || !*spec.ShareProcessNamespace) {
		t.Error("nginx's pod does not share its process namespace: the sidecar cannot reload nginx")
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v is not restricted", psc)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	p := vols["ticket-keys"].Projected
	var secrets []string
	if p != nil {
		for _, s := range p.Sources {
			if s.Secret != nil {
				secrets = append(secrets, s.Secret.Name)
			}
		}
	}
	if !slices.Equal(secrets, []string{"web-ticket-keys", "web-tls"}) {
		t.Errorf("volume ticket-keys projects secrets %v, want the ring's projection and the certificate", secrets)
	}
	if e := vols["server-keys"].EmptyDir; e == nil || e.Medium != corev1.StorageMediumMemory {
		t.Error("volume server-keys is not an emptyDir in memory")
	}
	for _, c := range []corev1.Container{side, srv} {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s's security context is not restricted", c.Name)
		}
		mounts := map[string]string{}
		for _, m := range c.VolumeMounts {
			if m.SubPath != "" || m.SubPathExpr != "" {
				t.Errorf("container %s mounts %s with a subPath: the kubelet never updates it", c.Name, m.Name)
			}
			mounts[m.Name] = m.MountPath
		}
		if mounts["ticket-keys"] != sampleVolume || mounts["server-keys"] != sampleShared {
			t.Errorf("container %s mounts %v", c.Name, mounts)
		}
	}
}
