package etcd

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/internal/etcdtest"
)

// TestCheckStorageFormat: a new site gets this binary's format; a later host of the same
// format starts; a site recorded by a newer or a too-old release is refused with what to run.
func TestCheckStorageFormat(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()

	got, err := CheckStorageFormat(ctx, cli, "v1.0.0")
	if err != nil || got.Format != StorageFormat || got.WrittenBy != "v1.0.0" {
		t.Fatalf("new site: got %+v, %v; want format %d recorded by v1.0.0", got, err, StorageFormat)
	}
	// A second host (another version, same format) reads the record and keeps it.
	got, err = CheckStorageFormat(ctx, cli, "v1.1.0")
	if err != nil || got.WrittenBy != "v1.0.0" {
		t.Fatalf("second host: got %+v, %v; want the first host's record kept", got, err)
	}

	put := func(rec StorageRecord) {
		b, _ := json.Marshal(rec)
		if _, err := cli.Put(ctx, StorageFormatKey, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	put(StorageRecord{Format: StorageFormat + 1, WrittenBy: "v9.0.0"})
	_, err = CheckStorageFormat(ctx, cli, "v1.1.0")
	if err == nil || !strings.Contains(err.Error(), "run flotilla v9.0.0 or newer") {
		t.Fatalf("site of a newer format: got %v, want a refusal that names v9.0.0", err)
	}
	if MinStorageFormat > 1 {
		put(StorageRecord{Format: MinStorageFormat - 1, WrittenBy: "v0.1.0"})
		if _, err = CheckStorageFormat(ctx, cli, "v1.1.0"); err == nil || !strings.Contains(err.Error(), "upgrade the site's hosts") {
			t.Fatalf("site of a too old format: got %v", err)
		}
	}
	if _, err := cli.Put(ctx, StorageFormatKey, "not json"); err != nil {
		t.Fatal(err)
	}
	if _, err = CheckStorageFormat(ctx, cli, "v1.1.0"); err == nil || !strings.Contains(err.Error(), "not readable") {
		t.Fatalf("damaged record: got %v, want it refused", err)
	}
}

func TestCompatibleFormatTooOld(t *testing.T) {
	err := CompatibleFormat(StorageRecord{Format: MinStorageFormat - 1, WrittenBy: "v0.0.1"}, "v2.0.0")
	if err == nil || !strings.Contains(err.Error(), "upgrade the site's hosts to a release that reads both formats") {
		t.Fatalf("got %v", err)
	}
}
