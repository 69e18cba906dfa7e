// Package serviceaccount issues and verifies bound ServiceAccount tokens, as Kubernetes does:
// JWTs signed by the API server that name a ServiceAccount and, for the tokens of a pod, the pod
// (and its node). A token stays valid only while what it names still exists: deleting the pod
// or re-creating the ServiceAccount revokes it before it expires.
//
// Every API server of a site signs with the same key, derived from the site CA's private key
// (which every host holds), so a token issued by one host is accepted by all.
package serviceaccount

import (
	"crypto"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// DefaultIssuer is the iss claim of the tokens, that of a Kubernetes cluster with the default
// service account issuer; it is also the default API audience.
const DefaultIssuer = "https://kubernetes.default.svc.cluster.local"

// signingKeyInfo binds the derived key to its use: the CA key derives no other key with it.
const signingKeyInfo = "flotilla service-account token signing key v1"

// DeriveSigningKey derives the token signing key from the site CA's private key (PEM, PKCS#8,
// SEC 1 or PKCS#1) with HKDF-SHA256. The derivation is deterministic, so every API server of
// the site gets the same key without exchanging one. The key is derived from the PKCS#8
// encoding of the parsed key, so the PEM's encoding does not matter.
func DeriveSigningKey(caKeyPEM []byte) (ed25519.PrivateKey, error) {
	key, err := parsePrivateKey(caKeyPEM)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	seed, err := hkdf.Key(sha256.New, der, nil, signingKeyInfo, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("derive service account signing key: %w", err)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// parsePrivateKey returns the first private key in pemData.
func parsePrivateKey(pemData []byte) (crypto.PrivateKey, error) {
	for rest := pemData; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("CA key: no private key in PEM data")
		}
		switch block.Type {
		case "PRIVATE KEY":
			return x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			return x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			return x509.ParsePKCS1PrivateKey(block.Bytes)
		}
	}
}

// claims are the private claims of a Kubernetes ServiceAccount token, under "kubernetes.io".
type claims struct {
	Kubernetes *kubernetesClaims `json:"kubernetes.io,omitempty"`
}

type kubernetesClaims struct {
	Namespace      string `json:"namespace,omitempty"`
	ServiceAccount ref    `json:"serviceaccount"`
	Pod            *ref   `json:"pod,omitempty"`
	Node           *ref   `json:"node,omitempty"`
}

type ref struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}
