// Package snapshot backs a site up and restores it: `flotilla snapshot save` (and the agent's
// --snapshot-schedule) writes one file holding a consistent etcd snapshot and what a restore
// needs to keep the site's identity (its CA, join token and admin token); `flotilla snapshot
// restore` prepares a new host's data directory from it, so `flotilla agent` starts a new
// one-voter site with the old site's objects, CA and credentials.
//
// The file is a gzip-compressed tar:
//
//	manifest.json  what was saved (Manifest), always the first entry
//	etcd.db        etcd's snapshot (bbolt database with its sha256 trailer)
//	pki/ca.crt     the site CA
//	pki/ca.key
//	token          the join token (FLO1:<CA pin>:<secret>)
//	admin-token    the admin kubeconfig's bearer token (kept on disk, not in etcd)
package snapshot

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdutl "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/flotilla-dev/flotilla/reconciler/etcd"
)

// Format is the version of the file layout; a newer one is refused.
const Format = 1

// Kind marks a flotilla snapshot's manifest.
const Kind = "FlotillaSnapshot"

// Manifest describes a snapshot; it is the archive's first entry.
type Manifest struct {
	Kind   string `json:"kind"`
	Format int    `json:"format"`
	// Site is the site's name (ConfigMap kube-system/flotilla-site key name), when readable.
	Site string    `json:"site,omitempty"`
	Time time.Time `json:"time"`
	// Host is the host the snapshot was taken on, Endpoint the etcd member it came from.
	Host     string `json:"host,omitempty"`
	Endpoint string `json:"endpoint"`
	// Revision and Keys are etcd's at the snapshot; EtcdSize is etcd.db's size in bytes and
	// EtcdSHA256 its digest (the file, trailer included).
	Revision    int64  `json:"revision"`
	Keys        int    `json:"keys"`
	EtcdSize    int64  `json:"etcdSize"`
	EtcdSHA256  string `json:"etcdSHA256"`
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// Members are the etcd members of the site, Nodes its Nodes' names.
	Members []string `json:"members"`
	Nodes   []string `json:"nodes"`
	// Version is flotilla's version that took the snapshot.
	Version string `json:"flotillaVersion"`
}

// Entry names in the archive.
const (
	entryManifest = "manifest.json"
	entryEtcd     = "etcd.db"
	entryCACert   = "pki/ca.crt"
	entryCAKey    = "pki/ca.key"
	entryToken    = "token"
	entryAdmin    = "admin-token"
)

// identityFiles are the data directory's files a restore needs (archive name = path below
// the data directory).
var identityFiles = []string{entryCACert, entryCAKey, entryToken, entryAdmin}

// SaveOptions configure Save.
type SaveOptions struct {
	// DataDir is the server host's data directory (its agent running).
	DataDir string
	// Out is the file to write (atomically, mode 0600).
	Out string
	// Endpoint is the etcd client URL to snapshot (default: this host's member, from
	// cluster.json; a standby's first voter).
	Endpoint string
	// Token is the site's join token, used when <data-dir>/token is absent: only the site's
	// first host writes that file, a host that joined has it in its --token-file.
	Token string
	// Host names the host (for the manifest; default: the name of the etcd member snapshotted).
	Host string
	// Version is flotilla's version.
	Version string
	// Timeout bounds the whole save (default 5 minutes).
	Timeout time.Duration
}

// Save takes a consistent snapshot of the site's etcd through the client API with the host's
// own etcd client certificate, verifies it and writes the snapshot file.
func Save(ctx context.Context, o SaveOptions) (*Manifest, error) {
	if o.DataDir == "" {
		return nil, errors.New("--data-dir is required: the data directory of a server host of the site (its agent running)")
	}
	if o.Out == "" {
		return nil, errors.New("give the file to write the snapshot to")
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	dir := o.DataDir
	st, err := etcd.LoadClusterState(filepath.Join(dir, "cluster.json"))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, "cluster.json"), err)
	}
	if st == nil {
		return nil, fmt.Errorf("%s is not the data directory of a host that has started (no cluster.json): give the --data-dir of a server host of the site", dir)
	}
	if st.Worker {
		return nil, fmt.Errorf("%s is a worker's data directory (--etcd=false): it holds no etcd and no site CA; run snapshot save on a server host", dir)
	}
	files := map[string][]byte{}
	for _, name := range identityFiles {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if name == entryToken && errors.Is(err, fs.ErrNotExist) {
			if o.Token == "" {
				return nil, fmt.Errorf("%s has no token file (this host joined the site): give --token-file, the file its agent was given", dir)
			}
			b, err = []byte(strings.TrimSpace(o.Token)+"\n"), nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the site's %s: %w (run as root on a server host, with its --data-dir)", name, err)
		}
		files[name] = b
	}
	if _, err := etcd.ParseToken(string(files[entryToken])); err != nil {
		return nil, fmt.Errorf("the site's join token: %w", err)
	}
	endpoint := o.Endpoint
	if endpoint == "" {
		if endpoint, err = defaultEndpoint(st); err != nil {
			return nil, err
		}
	}
	pkiDir := filepath.Join(dir, "pki")
	cli, err := etcd.NewClient([]string{endpoint}, filepath.Join(pkiDir, "ca.crt"), filepath.Join(pkiDir, "etcd-client.crt"), filepath.Join(pkiDir, "etcd-client.key"))
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", endpoint, err)
	}
	defer cli.Close()
	m := &Manifest{Kind: Kind, Format: Format, Time: time.Now().UTC().Truncate(time.Second), Host: o.Host, Endpoint: endpoint, Version: o.Version}
	describeSite(ctx, cli, m)

	outDir := filepath.Dir(o.Out)
	tmpDB, err := os.CreateTemp(outDir, ".etcd-snapshot-*.db")
	if err != nil {
		return nil, fmt.Errorf("write the snapshot next to %s: %w", o.Out, err)
	}
	defer os.Remove(tmpDB.Name())
	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		tmpDB.Close()
		return nil, fmt.Errorf("etcd snapshot from %s: %w (is the agent running?)", endpoint, err)
	}
	_, err = io.Copy(tmpDB, resp.Snapshot)
	resp.Snapshot.Close()
	if err == nil {
		err = tmpDB.Sync()
	}
	if cerr := tmpDB.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot from %s: %w", endpoint, err)
	}
	m.EtcdVersion = resp.Version
	status, sum, err := VerifyDB(tmpDB.Name())
	if err != nil {
		return nil, fmt.Errorf("the snapshot etcd sent is damaged: %w", err)
	}
	m.Revision, m.Keys, m.EtcdSHA256 = status.Revision, status.TotalKey, sum
	if fi, err := os.Stat(tmpDB.Name()); err == nil {
		m.EtcdSize = fi.Size()
	}
	if err := writeArchive(o.Out, m, tmpDB.Name(), files); err != nil {
		return nil, err
	}
	// Read it back: what was written is what a restore will read.
	if _, err := Inspect(o.Out); err != nil {
		os.Remove(o.Out)
		return nil, fmt.Errorf("verify %s: %w", o.Out, err)
	}
	return m, nil
}

// defaultEndpoint is this host's etcd member (same host as its recorded peer URL, etcd's
// client port) or, on a standby, the first voter it knows.
func defaultEndpoint(st *etcd.ClusterState) (string, error) {
	if st.Member && st.PeerURL != "" {
		u, err := url.Parse(st.PeerURL)
		if err == nil && u.Hostname() != "" {
			return "https://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(DefaultEtcdClientPort)), nil
		}
	}
	if len(st.ClientURLs) > 0 {
		return st.ClientURLs[0], nil
	}
	return "", errors.New("cluster.json names no etcd endpoint: give --endpoint https://IP:2379 (an etcd member of the site)")
}

// DefaultEtcdClientPort is etcd's client port unless the agent was given --etcd-client-port.
const DefaultEtcdClientPort = 2379

// describeSite fills the site's name, members and Nodes; what it cannot read stays empty.
func describeSite(ctx context.Context, cli *clientv3.Client, m *Manifest) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if list, err := cli.MemberList(cctx); err == nil {
		status, _ := cli.Status(cctx, m.Endpoint)
		for _, mem := range list.Members {
			m.Members = append(m.Members, mem.Name)
			if m.Host == "" && status != nil && status.Header != nil && mem.ID == status.Header.MemberId {
				m.Host = mem.Name // the member that answers: this host
			}
		}
		sort.Strings(m.Members)
	}
	// Nodes are stored under /registry/nodes/ (kube-apiserver's own key is minions).
	for _, prefix := range []string{"/registry/nodes/", "/registry/minions/"} {
		if resp, err := cli.Get(cctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()); err == nil {
			for _, kv := range resp.Kvs {
				m.Nodes = append(m.Nodes, path.Base(string(kv.Key)))
			}
		}
	}
	sort.Strings(m.Nodes)
	if resp, err := cli.Get(cctx, "/registry/configmaps/kube-system/flotilla-site"); err == nil && len(resp.Kvs) == 1 {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(resp.Kvs[0].Value, nil, nil)
		if cm, ok := obj.(*corev1.ConfigMap); err == nil && ok {
			m.Site = cm.Data["name"]
		}
	}
}

// VerifyDB checks an etcd snapshot file: its sha256 trailer matches its content and bbolt
// finds the database consistent (as `etcdutl snapshot status`). It returns the status and the
// file's sha256.
func VerifyDB(dbPath string) (etcdutl.Status, string, error) {
	f, err := os.Open(dbPath)
	if err != nil {
		return etcdutl.Status{}, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return etcdutl.Status{}, "", err
	}
	n := fi.Size()
	if n < 512+sha256.Size || n%512 != sha256.Size {
		return etcdutl.Status{}, "", fmt.Errorf("%d bytes: not an etcd snapshot with its sha256 trailer (truncated?)", n)
	}
	body, whole := sha256.New(), sha256.New()
	if _, err := io.Copy(io.MultiWriter(body, whole), io.LimitReader(f, n-sha256.Size)); err != nil {
		return etcdutl.Status{}, "", err
	}
	trailer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, trailer); err != nil {
		return etcdutl.Status{}, "", err
	}
	whole.Write(trailer)
	if !bytes.Equal(body.Sum(nil), trailer) {
		return etcdutl.Status{}, "", errors.New("its sha256 trailer does not match its content")
	}
	status, err := etcdutl.NewV3(zap.NewNop()).Status(dbPath)
	if err != nil {
		return status, "", fmt.Errorf("database check: %w", err)
	}
	return status, hex.EncodeToString(whole.Sum(nil)), nil
}

// writeArchive writes the snapshot file atomically: a temporary file in the same directory,
// synced, renamed over out; mode 0600 (it holds the CA key).
func writeArchive(out string, m *Manifest, dbPath string, files map[string][]byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	err = func() error {
		gz := gzip.NewWriter(tmp)
		tw := tar.NewWriter(gz)
		mb, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return err
		}
		if err := addFile(tw, entryManifest, mb); err != nil {
			return err
		}
		db, err := os.Open(dbPath)
		if err != nil {
			return err
		}
		defer db.Close()
		if err := tw.WriteHeader(&tar.Header{Name: entryEtcd, Mode: 0o600, Size: m.EtcdSize, ModTime: m.Time, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := io.Copy(tw, db); err != nil {
			return err
		}
		for _, name := range identityFiles {
			if err := addFile(tw, name, files[name]); err != nil {
				return err
			}
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return gz.Close()
	}()
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if d, err := os.Open(filepath.Dir(out)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

func addFile(tw *tar.Writer, name string, b []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(b)), Typeflag: tar.TypeReg, ModTime: time.Now()}); err != nil {
		return err
	}
	_, err := tw.Write(b)
	return err
}

// ErrNotSnapshot is returned for a file that is not a flotilla snapshot.
var ErrNotSnapshot = errors.New("not a flotilla snapshot (a file written by `flotilla snapshot save`)")

// maxSmallEntry bounds the size of the archive's small entries (manifest, keys, tokens).
const maxSmallEntry = 1 << 20

// read opens a snapshot file and calls db with etcd.db's content as a reader (to copy it
// out); it returns the manifest and the small files. Every entry is checked: a file that
// is not a snapshot, truncated or of an unknown format is refused.
func read(file string, db func(io.Reader) error) (*Manifest, map[string][]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, ErrNotSnapshot)
	}
	tr := tar.NewReader(gz)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != entryManifest || hdr.Size > maxSmallEntry {
		return nil, nil, fmt.Errorf("%s: %w", file, ErrNotSnapshot)
	}
	var m Manifest
	mb, err := io.ReadAll(tr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: truncated or damaged: %w", file, err)
	}
	if err := json.Unmarshal(mb, &m); err != nil || m.Kind != Kind {
		return nil, nil, fmt.Errorf("%s: %w", file, ErrNotSnapshot)
	}
	if m.Format > Format {
		return nil, nil, fmt.Errorf("%s: snapshot format %d is newer than this flotilla reads (%d, version %s wrote it): use a newer flotilla", file, m.Format, Format, m.Version)
	}
	files := map[string][]byte{}
	sawDB := false
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: truncated or damaged: %w", file, err)
		}
		switch {
		case hdr.Name == entryEtcd:
			if hdr.Size != m.EtcdSize {
				return nil, nil, fmt.Errorf("%s: etcd.db is %d bytes, the manifest says %d: damaged", file, hdr.Size, m.EtcdSize)
			}
			h := sha256.New()
			r := io.TeeReader(tr, h)
			if db != nil {
				err = db(r)
			}
			if err == nil {
				_, err = io.Copy(io.Discard, r)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("%s: truncated or damaged: %w", file, err)
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != m.EtcdSHA256 {
				return nil, nil, fmt.Errorf("%s: etcd.db's sha256 %s differs from the manifest's %s: damaged", file, got, m.EtcdSHA256)
			}
			sawDB = true
		case isIdentityFile(hdr.Name):
			if hdr.Size > maxSmallEntry {
				return nil, nil, fmt.Errorf("%s: %s too large: damaged", file, hdr.Name)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: truncated or damaged: %w", file, err)
			}
			files[hdr.Name] = b
		}
	}
	if !sawDB {
		return nil, nil, fmt.Errorf("%s: no etcd.db: truncated or damaged", file)
	}
	for _, name := range identityFiles {
		if len(files[name]) == 0 {
			return nil, nil, fmt.Errorf("%s: no %s: truncated or damaged", file, name)
		}
	}
	return &m, files, nil
}

func isIdentityFile(name string) bool {
	for _, n := range identityFiles {
		if n == name {
			return true
		}
	}
	return false
}

// Inspect reads and checks a whole snapshot file (every entry, etcd.db's digest) and returns
// its manifest.
func Inspect(file string) (*Manifest, error) {
	m, _, err := read(file, nil)
	return m, err
}

// RestoreOptions configure Restore.
type RestoreOptions struct {
	// File is the snapshot; DataDir the new host's data directory (empty or absent).
	File, DataDir string
	// Name is the new host's name (its etcd member's too); PeerURL the etcd peer URL its
	// agent will advertise (https://<listen or advertise address>:<etcd peer port>).
	Name, PeerURL string
}

// RevisionBump is added to etcd's revision on restore, and the revisions below marked
// compacted (as etcdutl's --bump-revision --mark-compacted), so a client still watching from
// a revision of the old site after the snapshot relists instead of missing changes.
const RevisionBump = 1_000_000_000

// Restore prepares DataDir so that `flotilla agent --data-dir DIR --name NAME` starts a new
// one-voter site from the snapshot: etcd's data restored as a one-member cluster of this
// host, and the site CA, join token and admin token where the agent reads them. No
// cluster.json is written: the agent starts as the first host of a site (no --join).
func Restore(o RestoreOptions) (*Manifest, error) {
	if o.DataDir == "" || o.Name == "" || o.PeerURL == "" {
		return nil, errors.New("restore needs --data-dir, --name and the host's address")
	}
	created, err := prepareDir(o.DataDir)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if ok {
			return
		}
		if created {
			os.RemoveAll(o.DataDir)
			return
		}
		entries, _ := os.ReadDir(o.DataDir)
		for _, e := range entries {
			os.RemoveAll(filepath.Join(o.DataDir, e.Name()))
		}
	}()
	tmpDB := filepath.Join(o.DataDir, ".restore-etcd.db")
	m, files, err := read(o.File, func(r io.Reader) error {
		f, err := os.OpenFile(tmpDB, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if _, _, err := VerifyDB(tmpDB); err != nil {
		return nil, fmt.Errorf("%s: etcd.db: %w", o.File, err)
	}
	lg := zap.NewNop()
	if err := etcdutl.NewV3(lg).Restore(etcdutl.RestoreConfig{
		SnapshotPath: tmpDB, Name: o.Name, OutputDataDir: filepath.Join(o.DataDir, "etcd"),
		PeerURLs: []string{o.PeerURL}, InitialCluster: o.Name + "=" + o.PeerURL,
		// The token the agent's etcd uses (reconciler/etcd Start).
		InitialClusterToken: "flotilla",
		RevisionBump:        RevisionBump, MarkCompacted: true,
	}); err != nil {
		return nil, fmt.Errorf("restore etcd's data: %w", err)
	}
	if err := os.Remove(tmpDB); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.DataDir, "pki"), 0o700); err != nil {
		return nil, err
	}
	for _, name := range identityFiles {
		mode := os.FileMode(0o600)
		if name == entryCACert {
			mode = 0o644
		}
		if err := os.WriteFile(filepath.Join(o.DataDir, filepath.FromSlash(name)), files[name], mode); err != nil {
			return nil, err
		}
	}
	ok = true
	return m, nil
}

// prepareDir makes dir if absent and refuses one that holds anything; it reports whether it
// created dir.
func prepareDir(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, err
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("--data-dir %s: %w", dir, err)
	case len(entries) > 0:
		names := make([]string, 0, 3)
		for i, e := range entries {
			if i == 3 {
				names = append(names, "...")
				break
			}
			names = append(names, e.Name())
		}
		return false, fmt.Errorf("--data-dir %s is not empty (%s): restore prepares a new host's data directory; give an empty or new directory (never the data directory of a host that runs)", dir, strings.Join(names, ", "))
	}
	return false, os.Chmod(dir, 0o700)
}
