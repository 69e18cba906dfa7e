package apiserver

import (
	_ "unsafe" // for go:linkname

	"go.uber.org/zap"
	// The storage factory builds its etcd clients with this package's logger.
	_ "k8s.io/apiserver/pkg/storage/storagebackend/factory"
)

// storageEtcdClientLogger is the logger k8s.io/apiserver gives the etcd clients of its
// storage. Upstream makes it once, at init, writing zap JSON to stderr, and offers no option
// to replace it; this is the one way to keep those clients in the host's log stream.
//
//go:linkname storageEtcdClientLogger k8s.io/apiserver/pkg/storage/storagebackend/factory.etcd3ClientLogger
var storageEtcdClientLogger *zap.Logger

// SetStorageEtcdClientLogger replaces the logger of the etcd clients the API server's storage
// creates from now on; call it before New.
func SetStorageEtcdClientLogger(l *zap.Logger) {
	if l != nil {
		storageEtcdClientLogger = l
	}
}
