package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/internal/testing/fleet"
)

// The paths the samples mount their volumes at.
const (
	sampleVolume = "/var/run/ringmaster"
	sampleShared = "/var/run/ringmaster-server"
	sampleTLS    = "/var/run/ringmaster-tls"
)

// agentRepository is the sidecar's image as hack/images names it.
const agentRepository = "ghcr.io/ringmaster-io/ringmaster-agent"

// samples are the example Deployments, their server, the file of their
// ConfigMap the server reads, its listen directive, and the files the
// server's container must see, by mount path (beside the emptyDir, whose
// files the sidecar writes).
var samples = []struct {
	kind             fleet.ServerKind
	file, configFile string
	listen           string
	serverFiles      []string
}{
	{fleet.Nginx, "nginx_ringmaster-agent.yaml", "nginx.conf", "listen 8443", []string{sampleTLS + "/tls.crt", sampleTLS + "/tls.key"}},
	{fleet.HAProxy, "haproxy_ringmaster-agent.yaml", "haproxy.cfg", "bind :8443", []string{sampleTLS + "/tls.crt", sampleTLS + "/tls.crt.key"}},
}

// sampleSecrets are the Secrets the samples' volumes name, as the operator
// and cert-manager write them: the ring's projection holds ticketkeys.json
// and the files of every format the sample ring lists, the certificate's
// Secret its chain, key and CA.
func sampleSecrets(t *testing.T, ring keyring.Ring, tls map[string][]byte) map[string]map[string][]byte {
	t.Helper()
	data, err := keyring.Encode(ring)
	if err != nil {
		t.Fatal(err)
	}
	projection := map[string][]byte{keyring.FileName: data}
	for _, f := range []keyring.Format{keyring.FormatNginx, keyring.FormatHAProxy} {
		files, err := ring.Files(f, ring.IssuedAt)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range files {
			projection[k] = v
		}
	}
	return map[string]map[string][]byte{"web-ticket-keys": projection, "web-tls": tls}
}

// TestSampleShape checks the example Deployments of config/samples: each
// container sees only its own files (the sidecar ticketkeys.json, the
// server its certificate and the emptyDir the sidecar derives its keys
// into), Secret files are 0440, the two run as different users (or, for
// nginx, which the sidecar must signal, as one user in different groups),
// images are pinned, the sidecar is native and its probes are its
// endpoints, no subPath, restricted security contexts.
// TestSampleDeployments runs them.
func TestSampleShape(t *testing.T) {
	appVersion := chartAppVersion(t)
	for _, s := range samples {
		t.Run(string(s.kind), func(t *testing.T) {
			cm, dep, svc := readSampleAll(t, s.file)
			spec := dep.Spec.Template.Spec
			checkSampleShape(t, s.kind, spec)
			checkSampleService(t, dep, svc)
			if _, ok := cm.Data[s.configFile]; !ok {
				t.Errorf("ConfigMap %s has no %s", cm.Name, s.configFile)
			}

			ring, _, _ := sampleRing(1, time.Now())
			secrets := sampleSecrets(t, ring, map[string][]byte{"tls.crt": []byte("chain"), "tls.key": []byte("key"), "ca.crt": []byte("ca")})
			side, srv := spec.InitContainers[0], spec.Containers[0]
			if got, want := visibleFiles(t, spec, side, secrets), []string{sampleVolume + "/" + keyring.FileName}; !slices.Equal(got, want) {
				t.Errorf("the sidecar sees %v, want only %v", got, want)
			}
			if got := visibleFiles(t, spec, srv, secrets); !slices.Equal(got, s.serverFiles) {
				t.Errorf("the server sees %v, want only %v", got, s.serverFiles)
			}
			for _, c := range []corev1.Container{side, srv} {
				if !mounts(c, "server-keys") {
					t.Errorf("container %s does not mount the emptyDir server-keys", c.Name)
				}
			}

			if want := agentRepository + ":" + appVersion; side.Image != want {
				t.Errorf("the sidecar's image is %s, want %s: the image make images builds, at the chart's appVersion", side.Image, want)
			}
			for _, c := range []corev1.Container{side, srv} {
				if !pinned.MatchString(c.Image) {
					t.Errorf("container %s's image %s is not pinned to a version tag", c.Name, c.Image)
				}
			}

			sideUID, sideGID := userOf(spec, side)
			srvUID, srvGID := userOf(spec, srv)
			if sideUID == nil || srvUID == nil || sideGID == nil || srvGID == nil {
				t.Fatalf("a container has no runAsUser or runAsGroup: sidecar %v:%v, server %v:%v", sideUID, sideGID, srvUID, srvGID)
			}
			shared := spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace
			switch s.kind {
			case fleet.Nginx:
				// kill(2) wants the same user; /proc/<pid>/root and the
				// like want the same user and group.
				if !shared {
					t.Error("nginx's pod does not share its process namespace: the sidecar cannot reload nginx")
				}
				if *sideUID != *srvUID || *sideGID == *srvGID {
					t.Errorf("sidecar %d:%d, nginx %d:%d: want one user, so that the sidecar may signal nginx, and different groups, so that nginx may not open the sidecar's /proc entries",
						*sideUID, *sideGID, *srvUID, *srvGID)
				}
			default:
				if shared {
					t.Error("the pod shares its process namespace, which the sidecar does not need")
				}
				if *sideUID == *srvUID || *sideGID == *srvGID {
					t.Errorf("sidecar %d:%d and server %d:%d: want different users and groups", *sideUID, *sideGID, *srvUID, *srvGID)
				}
			}
			if fsg := spec.SecurityContext.FSGroup; fsg == nil || *fsg == *sideGID || *fsg == *srvGID {
				t.Errorf("fsGroup %v: want a group of the pod's volumes apart from either container's own", fsg)
			}
		})
	}
}

// pinned matches an image reference with a version tag (v1.2.3, 1.22.1),
// a digest, or both: never :latest, nor no tag at all.
var pinned = regexp.MustCompile(`^[^:@]+(:v?[0-9]+(\.[0-9]+)+(@sha256:[0-9a-f]{64})?|@sha256:[0-9a-f]{64})$`)

// sampleRing is a ring of an active and a staged key, from fixed secrets.
func sampleRing(epoch int64, at time.Time) (ring keyring.Ring, active, staged keyring.Key) {
	key := func(label string, from, retire time.Time) keyring.Key {
		k := keyring.NewKey(keyring.Secret(sha256.Sum256([]byte(label))))
		k.ActiveFrom, k.RetireAt, k.ExpiresAt = from, retire, retire.Add(time.Hour)
		return k
	}
	active = key("active", at.Add(-time.Minute), at.Add(time.Hour))
	staged = key("staged", at.Add(time.Hour), at.Add(2*time.Hour))
	return keyring.Ring{Name: "shop/web", Epoch: epoch, IssuedAt: at.Truncate(time.Second), Keys: []keyring.Key{staged, active}}, active, staged
}

func readSample(t *testing.T, name string) (*corev1.ConfigMap, *appsv1.Deployment) {
	t.Helper()
	cm, dep, _ := readSampleAll(t, name)
	return cm, dep
}

// readSampleAll reads a sample's ConfigMap, Deployment and Service.
func readSampleAll(t *testing.T, name string) (*corev1.ConfigMap, *appsv1.Deployment, *corev1.Service) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	var cm *corev1.ConfigMap
	var dep *appsv1.Deployment
	var svc *corev1.Service
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
		case "Service":
			svc = &corev1.Service{}
			err = yaml.UnmarshalStrict([]byte(doc), svc)
		default:
			t.Fatalf("%s: unexpected kind %q", name, meta.Kind)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if cm == nil || dep == nil || svc == nil {
		t.Fatalf("%s: want a ConfigMap, a Deployment and a Service", name)
	}
	return cm, dep, svc
}

// checkSampleService: the sample's Service selects the Deployment's pods
// and forwards to the server's https port, never to the sidecar's metrics.
func checkSampleService(t *testing.T, dep *appsv1.Deployment, svc *corev1.Service) {
	t.Helper()
	labels := dep.Spec.Template.Labels
	if len(svc.Spec.Selector) == 0 {
		t.Errorf("Service %s selects nothing", svc.Name)
	}
	for k, v := range svc.Spec.Selector {
		if labels[k] != v {
			t.Errorf("Service %s selects %s=%s, which the pods (%v) lack", svc.Name, k, v, labels)
		}
	}
	srv := dep.Spec.Template.Spec.Containers[0]
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("Service %s has %d ports, want the server's https only", svc.Name, len(svc.Spec.Ports))
	}
	target := svc.Spec.Ports[0].TargetPort.String()
	if !slices.ContainsFunc(srv.Ports, func(p corev1.ContainerPort) bool { return p.Name == target || fmt.Sprint(p.ContainerPort) == target }) {
		t.Errorf("Service %s targets port %s, which the server %s does not open (%v)", svc.Name, target, srv.Name, srv.Ports)
	}
}

// chartAppVersion is the chart's appVersion, the release the samples pin.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "charts", "ringmaster", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml's appVersion: %q, %v", c.AppVersion, err)
	}
	// hack/images names the sidecar's image so; a rename there must reach
	// the samples.
	src, err := os.ReadFile(filepath.Join("..", "..", "hack", "images", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `Repository: "`+agentRepository+`"`) {
		t.Fatalf("hack/images builds no image %s", agentRepository)
	}
	return c.AppVersion
}

// userOf returns the user and group c runs as: its own security context's,
// or the pod's.
func userOf(spec corev1.PodSpec, c corev1.Container) (uid, gid *int64) {
	if psc := spec.SecurityContext; psc != nil {
		uid, gid = psc.RunAsUser, psc.RunAsGroup
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
	}
	return uid, gid
}

func mounts(c corev1.Container, volume string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume })
}

// secretFiles returns the files a Secret volume (or a projected volume of
// Secrets) presents, from secrets, by path in the volume, with their mode.
// Other volumes present none.
func secretFiles(t *testing.T, v corev1.Volume, secrets map[string]map[string][]byte) map[string]secretFile {
	t.Helper()
	out := map[string]secretFile{}
	add := func(name string, items []corev1.KeyToPath, mode *int32) {
		data, ok := secrets[name]
		if !ok {
			t.Fatalf("volume %s: no Secret %s in the test", v.Name, name)
		}
		m := int32(0o644)
		if mode != nil {
			m = *mode
		}
		if len(items) == 0 {
			for k, d := range data {
				out[k] = secretFile{d, m}
			}
			return
		}
		for _, it := range items {
			d, ok := data[it.Key]
			if !ok {
				t.Fatalf("volume %s: Secret %s has no key %s", v.Name, name, it.Key)
			}
			im := m
			if it.Mode != nil {
				im = *it.Mode
			}
			out[it.Path] = secretFile{d, im}
		}
	}
	switch {
	case v.Secret != nil:
		add(v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode)
	case v.Projected != nil:
		for _, s := range v.Projected.Sources {
			if s.Secret != nil {
				add(s.Secret.Name, s.Secret.Items, v.Projected.DefaultMode)
			}
		}
	}
	return out
}

type secretFile struct {
	data []byte
	mode int32
}

// visibleFiles lists the Secret files container c sees, by full path.
func visibleFiles(t *testing.T, spec corev1.PodSpec, c corev1.Container, secrets map[string]map[string][]byte) []string {
	t.Helper()
	var out []string
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Fatalf("container %s mounts %s, which the pod does not have", c.Name, m.Name)
		}
		for p := range secretFiles(t, spec.Volumes[i], secrets) {
			out = append(out, m.MountPath+"/"+p)
		}
	}
	sort.Strings(out)
	return out
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
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("pod security context %+v is not restricted", psc)
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o440 || len(v.Secret.Items) == 0) {
			t.Errorf("Secret volume %s: defaultMode %v and %d items, want 0440 and the files needed listed", v.Name, v.Secret.DefaultMode, len(v.Secret.Items))
		}
		if v.Projected != nil || v.HostPath != nil {
			t.Errorf("volume %s: want Secret volumes, one per container", v.Name)
		}
	}
	if e := volume(spec, "server-keys").EmptyDir; e == nil || e.Medium != corev1.StorageMediumMemory {
		t.Error("volume server-keys is not an emptyDir in memory")
	}
	for _, c := range []corev1.Container{side, srv} {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s's security context is not restricted", c.Name)
		}
		mounted := map[string]string{}
		for _, m := range c.VolumeMounts {
			if m.SubPath != "" || m.SubPathExpr != "" {
				t.Errorf("container %s mounts %s with a subPath: the kubelet never updates it", c.Name, m.Name)
			}
			mounted[m.Name] = m.MountPath
		}
		if mounted["server-keys"] != sampleShared {
			t.Errorf("container %s mounts %v", c.Name, mounted)
		}
	}
	if m := mountPaths(side); m["ring"] != sampleVolume || len(m) != 2 {
		t.Errorf("the sidecar mounts %v, want the ring at %s and the emptyDir", m, sampleVolume)
	}
	if m := mountPaths(srv); m["tls"] != sampleTLS || m["ring"] != "" {
		t.Errorf("the server mounts %v, want the certificate at %s and not the ring", m, sampleTLS)
	}
}

func mountPaths(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		out[m.Name] = m.MountPath
	}
	return out
}

func volume(spec corev1.PodSpec, name string) corev1.Volume {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	return corev1.Volume{}
}
