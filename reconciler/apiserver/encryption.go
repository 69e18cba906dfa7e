package apiserver

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	storagevalue "k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	"k8s.io/apiserver/pkg/storage/value/encrypt/secretbox"
)

// SecretsKeyName is the name of the site's derived Secrets key, as an EncryptionConfiguration
// names a key: Secrets it encrypts are stored as "k8s:enc:secretbox:v1:site-v1:...".
const SecretsKeyName = "site-v1"

// applyEncryption configures the encryption at rest of gc's storage: an
// EncryptionConfiguration file when given (as kube-apiserver's --encryption-provider-config,
// through the etcd options), or else Secrets encrypted with key (secretbox, named
// SecretsKeyName), Secrets stored in clear (before encryption) still read. No file and no
// key: nothing is encrypted.
func applyEncryption(gc *genericapiserver.Config, etcd *genericoptions.EtcdOptions, file string, key []byte) error {
	if file != "" {
		etcd.EncryptionProviderConfigFilepath = file
		return nil
	}
	if key == nil {
		return nil
	}
	t, err := secretsTransformer(key)
	if err != nil {
		return err
	}
	gc.ResourceTransformers = encryptionconfig.StaticTransformers{corev1.Resource("secrets"): t}
	return nil
}

// secretsTransformer is what an EncryptionConfiguration of Secrets with providers
// [secretbox: {keys: [{name: site-v1, secret: base64(key)}]}, identity: {}] builds:
// secretbox writes, both read.
func secretsTransformer(key []byte) (storagevalue.Transformer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("the Secrets encryption key has %d bytes, want 32", len(key))
	}
	k := [32]byte(key)
	keys := storagevalue.NewPrefixTransformers(errors.New("no matching key was found for the provided Secretbox transformer"),
		storagevalue.PrefixTransformer{Prefix: []byte(SecretsKeyName + ":"), Transformer: secretbox.NewSecretboxTransformer(k)})
	return storagevalue.NewPrefixTransformers(errors.New("no matching prefix found"),
		storagevalue.PrefixTransformer{Prefix: []byte("k8s:enc:secretbox:v1:"), Transformer: keys},
		storagevalue.PrefixTransformer{Prefix: []byte{}, Transformer: identity.NewEncryptCheckTransformer()},
	), nil
}
