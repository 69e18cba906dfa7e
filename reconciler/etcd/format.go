package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// StorageFormatKey records the format of the site's data in etcd: the layout of flotilla's
// own keys and the storage versions of the API's objects under /registry.
const StorageFormatKey = "/flotilla/storage-format"

// The formats this binary reads: a site's data in a format outside [MinStorageFormat,
// StorageFormat] cannot be served by it. A release that changes how data is stored raises
// StorageFormat (and migrates on start); one that drops reading an old format raises
// MinStorageFormat, so an upgrade must pass through a release that migrated the data.
const (
	StorageFormat    = 1
	MinStorageFormat = 1
)

// ErrStorageFormat is wrapped by the errors of a site whose data this binary cannot read.
var ErrStorageFormat = errors.New("storage format not readable by this binary")

// StorageRecord is the value of StorageFormatKey.
type StorageRecord struct {
	Format int `json:"format"`
	// WrittenBy is the flotilla version that recorded the format.
	WrittenBy string `json:"writtenBy"`
}

// CheckStorageFormat records this binary's storage format on a site that has none (a new
// site, or one written before formats were recorded) and refuses a site whose recorded
// format the binary cannot read, saying which flotilla to run instead. version is this
// binary's flotilla version, for the record and the message.
func CheckStorageFormat(ctx context.Context, cli *clientv3.Client, version string) (StorageRecord, error) {
	mine := StorageRecord{Format: StorageFormat, WrittenBy: version}
	b, err := json.Marshal(mine)
	if err != nil {
		return StorageRecord{}, err
	}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(StorageFormatKey), "=", 0)).
		Then(clientv3.OpPut(StorageFormatKey, string(b))).
		Else(clientv3.OpGet(StorageFormatKey)).
		Commit()
	if err != nil {
		return StorageRecord{}, fmt.Errorf("read the site's storage format (%s): %w", StorageFormatKey, err)
	}
	if resp.Succeeded {
		return mine, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return StorageRecord{}, fmt.Errorf("the site's storage format (%s) vanished while it was read: start the host again", StorageFormatKey)
	}
	var site StorageRecord
	if err := json.Unmarshal(kvs[0].Value, &site); err != nil || site.Format < 1 {
		return StorageRecord{}, fmt.Errorf("%w: the site's storage format record %s is not readable (%q): it was written by another program, or damaged; restore the site from a snapshot", ErrStorageFormat, StorageFormatKey, kvs[0].Value)
	}
	return site, CompatibleFormat(site, version)
}

// CompatibleFormat says whether a binary of version reads data in site's format.
func CompatibleFormat(site StorageRecord, version string) error {
	switch {
	case site.Format > StorageFormat:
		return fmt.Errorf("%w: this site's data is in storage format %d (recorded by flotilla %s); this binary (flotilla %s) reads formats %d to %d: "+
			"run flotilla %s or newer on this host, the site's hosts were upgraded past this binary", ErrStorageFormat, site.Format, site.WrittenBy, version, MinStorageFormat, StorageFormat, site.WrittenBy)
	case site.Format < MinStorageFormat:
		return fmt.Errorf("%w: this site's data is in storage format %d (recorded by flotilla %s); this binary (flotilla %s) reads formats %d to %d: "+
			"upgrade the site's hosts to a release that reads both formats first (it migrates the data), then to this one", ErrStorageFormat, site.Format, site.WrittenBy, version, MinStorageFormat, StorageFormat)
	}
	return nil
}
