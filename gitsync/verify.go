package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

const armoredKeyHeader = "-----BEGIN PGP PUBLIC KEY BLOCK-----"

// ParseKeyRing reads the trusted OpenPGP public keys from the values of a Secret (each value
// may hold several ASCII-armored key blocks). A value that is not a key is an error naming
// its key, so a mistake in the Secret is reported rather than silently trusted less.
func ParseKeyRing(data map[string][]byte) (openpgp.EntityList, error) {
	names := make([]string, 0, len(data))
	for k := range data {
		names = append(names, k)
	}
	sort.Strings(names)
	var ring openpgp.EntityList
	for _, k := range names {
		blocks := strings.Split(string(data[k]), armoredKeyHeader)
		found := false
		for _, b := range blocks[1:] {
			el, err := openpgp.ReadArmoredKeyRing(strings.NewReader(armoredKeyHeader + b))
			if err != nil {
				return nil, fmt.Errorf("key %q: not an ASCII-armored OpenPGP public key: %w", k, err)
			}
			ring = append(ring, el...)
			found = true
		}
		if !found {
			return nil, fmt.Errorf("key %q: no %q block", k, armoredKeyHeader)
		}
	}
	if len(ring) == 0 {
		return nil, errors.New("no OpenPGP public keys")
	}
	return ring, nil
}

// VerifyCommit checks that commit, in the repository at dir, carries one OpenPGP signature
// made by a key in ring. It returns the signer's key id (hex) or an error saying what is
// wrong with the commit: unsigned, signed by an unknown key, or a bad signature.
func VerifyCommit(dir, commit string, ring openpgp.EntityList) (string, error) {
	repo, err := git.PlainOpen(dir)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", dir, err)
	}
	c, err := repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return "", fmt.Errorf("read commit %s: %w", commit, err)
	}
	if strings.TrimSpace(c.PGPSignature) == "" {
		return "", fmt.Errorf("commit %s is not signed", commit)
	}
	if strings.Count(c.PGPSignature, "-----BEGIN PGP SIGNATURE-----") != 1 {
		return "", fmt.Errorf("commit %s does not carry exactly one OpenPGP signature (SSH and X.509 signatures are not supported)", commit)
	}
	issuer := signatureIssuer(c.PGPSignature)
	encoded := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(encoded); err != nil {
		return "", fmt.Errorf("encode commit %s: %w", commit, err)
	}
	r, err := encoded.Reader()
	if err != nil {
		return "", err
	}
	signer, err := openpgp.CheckArmoredDetachedSignature(ring, r, strings.NewReader(c.PGPSignature), nil)
	if errors.Is(err, pgperrors.ErrUnknownIssuer) {
		return "", fmt.Errorf("commit %s is signed by key %s, which is not a trusted key", commit, issuer)
	}
	if err != nil {
		return "", fmt.Errorf("commit %s: signature by key %s does not verify: %w", commit, issuer, err)
	}
	return fmt.Sprintf("%X", signer.PrimaryKey.KeyId), nil
}

// signatureIssuer returns the key id an armored signature names, or "unknown".
func signatureIssuer(armored string) string {
	block, err := armor.Decode(bytes.NewReader([]byte(armored)))
	if err != nil {
		return "unknown"
	}
	p, err := packet.Read(block.Body)
	if err != nil {
		return "unknown"
	}
	if sig, ok := p.(*packet.Signature); ok {
		if len(sig.IssuerFingerprint) > 0 {
			return fmt.Sprintf("%X", sig.IssuerFingerprint)
		}
		if sig.IssuerKeyId != nil {
			return fmt.Sprintf("%016X", *sig.IssuerKeyId)
		}
	}
	return "unknown"
}
