// Command pki writes the single-node cluster's certificates and keys into a
// directory: a certificate authority; kube-apiserver's serving certificate;
// the kubelet's serving certificate; a client certificate for each
// component and for the admin; and the service account signing key. All keys
// are ECDSA P-256, and everything is valid for a week: the cluster lives for
// a test run.
//
//	pki -dir STATE/pki -node ringmaster-node -node-ip 10.240.0.2 -service-ip 10.96.0.1
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

func main() {
	dir := flag.String("dir", "", "output directory")
	node := flag.String("node", "", "node name")
	nodeIP := flag.String("node-ip", "", "node address")
	serviceIP := flag.String("service-ip", "", "ClusterIP of the kubernetes Service")
	flag.Parse()
	if err := run(*dir, *node, net.ParseIP(*nodeIP), net.ParseIP(*serviceIP)); err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		os.Exit(1)
	}
}

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func run(dir, node string, nodeIP, serviceIP net.IP) error {
	if dir == "" || node == "" || nodeIP == nil || serviceIP == nil {
		return fmt.Errorf("-dir, -node, -node-ip and -service-ip are required")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ringmaster single-node cluster CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	authority := ca{cert, caKey}
	if err := writePair(dir, "ca", der, caKey); err != nil {
		return err
	}

	type leaf struct {
		name   string
		cn     string
		orgs   []string
		server bool
		dns    []string
		ips    []net.IP
	}
	leaves := []leaf{
		{name: "apiserver", cn: "kube-apiserver", server: true,
			dns: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
			ips: []net.IP{net.IPv4(127, 0, 0, 1), nodeIP, serviceIP}},
		{name: "kubelet-serving", cn: node, server: true, dns: []string{node}, ips: []net.IP{nodeIP}},
		{name: "admin", cn: "admin", orgs: []string{"system:masters"}},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
		{name: "kube-controller-manager", cn: "system:kube-controller-manager"},
		{name: "kube-scheduler", cn: "system:kube-scheduler"},
		{name: "kube-proxy", cn: "system:kube-proxy"},
		{name: "kubelet", cn: "system:node:" + node, orgs: []string{"system:nodes"}},
	}
	for i, l := range leaves {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		t := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: l.cn, Organization: l.orgs},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			DNSNames: l.dns, IPAddresses: l.ips,
		}
		if l.server {
			t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}
		der, err := x509.CreateCertificate(rand.Reader, t, authority.cert, key.Public(), authority.key)
		if err != nil {
			return err
		}
		if err := writePair(dir, l.name, der, key); err != nil {
			return err
		}
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub, 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, "sa.key"), saKey)
}

func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}
