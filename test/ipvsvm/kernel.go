// Package ipvsvm boots a small virtual machine with a Debian kernel that has ip_vs and runs the
// IPVS backend's integration tests inside it: this project's machines have no ip_vs, so this is
// where the backend is proven against a real kernel. Kernel and modules are fetched with
// apt-get into a cache folder outside the repository, keyed by package version.
package ipvsvm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// KernelMeta is the Debian metapackage that names the current kernel package.
const KernelMeta = "linux-image-amd64"

// GuestModules are the modules the guest loads (with their dependencies): IPVS and every
// scheduler the backend offers, nftables with what the backends' tables use, and the
// interfaces the tests create. crc32c_generic comes first: libcrc32c needs a crc32c
// implementation and busybox modprobe ignores soft dependencies.
var GuestModules = []string{
	"crc32c_generic",
	"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_lc", "ip_vs_wlc", "ip_vs_dh", "ip_vs_sh", "ip_vs_sed", "ip_vs_nq",
	"nf_tables", "nft_chain_nat", "nft_nat", "nft_masq", "nft_ct", "nft_reject", "nft_reject_ipv4",
	"nft_fib_ipv4", "nft_numgen",
	"dummy", "veth",
}

// Kernel is an unpacked kernel in the cache.
type Kernel struct {
	Package string // e.g. linux-image-6.1.0-57-amd64_6.1.192-3
	Release string // uname -r, e.g. 6.1.0-57-amd64
	Dir     string // cache entry
	BzImage string
	// ModRoot holds lib/modules/<Release>/ with the needed modules and a modules.dep.
	ModRoot string
	// LoadOrder lists module paths relative to lib/modules/<Release>, dependencies first.
	LoadOrder []string
}

func run(ctx context.Context, dir string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

var dependsRe = regexp.MustCompile(`(?m)^Depends:.*?(linux-image-[0-9][^ ,]*) \(= ([^)]+)\)`)

// resolveKernelPackage asks apt (locally, from the package lists) which kernel package the
// metapackage points to, and its version.
func resolveKernelPackage(ctx context.Context) (pkg, version string, err error) {
	out, err := run(ctx, "", "apt-cache", "show", "--no-all-versions", KernelMeta)
	if err != nil {
		return "", "", fmt.Errorf("find %s in the apt package lists (run apt-get update): %w", KernelMeta, err)
	}
	m := dependsRe.FindStringSubmatch(out)
	if m == nil {
		return "", "", fmt.Errorf("apt-cache show %s: no kernel package in Depends:\n%s", KernelMeta, out)
	}
	return m[1], m[2], nil
}

// FetchKernel returns the cached kernel for the current linux-image-amd64, downloading and
// unpacking it on first use. When apt cannot resolve the package (no package lists, offline)
// the newest complete cache entry is used.
func FetchKernel(ctx context.Context, cacheRoot string, logf func(string, ...any)) (*Kernel, error) {
	pkg, version, rerr := resolveKernelPackage(ctx)
	if rerr != nil {
		entries, _ := filepath.Glob(filepath.Join(cacheRoot, "linux-image-*", "complete"))
		if len(entries) == 0 {
			return nil, rerr
		}
		sort.Strings(entries)
		dir := filepath.Dir(entries[len(entries)-1])
		logf("apt cannot resolve %s (%v); using cached %s", KernelMeta, rerr, filepath.Base(dir))
		return loadKernel(dir)
	}
	key := pkg + "_" + version
	dir := filepath.Join(cacheRoot, key)
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		return loadKernel(dir)
	}
	if err := os.MkdirAll(cacheRoot, 0o755); err != nil {
		return nil, fmt.Errorf("create kernel cache %s: %w", cacheRoot, err)
	}
	work, err := os.MkdirTemp(cacheRoot, ".fetch-")
	if err != nil {
		return nil, fmt.Errorf("create kernel cache scratch folder: %w", err)
	}
	defer os.RemoveAll(work)
	logf("downloading %s=%s into %s", pkg, version, cacheRoot)
	if _, err := run(ctx, work, "apt-get", "download", "-q", pkg+"="+version); err != nil {
		return nil, fmt.Errorf("download the kernel package: %w", err)
	}
	debs, _ := filepath.Glob(filepath.Join(work, "*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("apt-get download %s left %d .deb files", pkg, len(debs))
	}
	unpacked := filepath.Join(work, "root")
	if _, err := run(ctx, work, "dpkg-deb", "-x", debs[0], unpacked); err != nil {
		return nil, err
	}
	rels, _ := filepath.Glob(filepath.Join(unpacked, "lib/modules/*"))
	if len(rels) != 1 {
		return nil, fmt.Errorf("%s: want one lib/modules/<release>, found %v", pkg, rels)
	}
	release := filepath.Base(rels[0])
	// The package ships no modules.dep (the installer's depmod makes it).
	if _, err := run(ctx, "", "busybox", "depmod", "-b", unpacked, release); err != nil {
		return nil, err
	}
	order, err := moduleClosure(filepath.Join(rels[0], "modules.dep"), GuestModules)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
	}
	stage := filepath.Join(work, "entry")
	modDir := filepath.Join(stage, "lib/modules", release)
	for _, m := range order {
		if err := copyFile(filepath.Join(rels[0], m), filepath.Join(modDir, m)); err != nil {
			return nil, err
		}
	}
	for _, f := range []string{"modules.builtin", "modules.builtin.modinfo", "modules.order"} {
		if err := copyFile(filepath.Join(rels[0], f), filepath.Join(modDir, f)); err != nil {
			return nil, err
		}
	}
	if _, err := run(ctx, "", "busybox", "depmod", "-b", stage, release); err != nil {
		return nil, err
	}
	if err := copyFile(filepath.Join(unpacked, "boot/vmlinuz-"+release), filepath.Join(stage, "vmlinuz")); err != nil {
		return nil, err
	}
	meta := "release=" + release + "\n" + "order=" + strings.Join(order, ",") + "\n"
	if err := os.WriteFile(filepath.Join(stage, "kernel.meta"), []byte(meta), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(stage, "complete"), nil, 0o644); err != nil {
		return nil, err
	}
	_ = os.RemoveAll(dir) // an incomplete earlier attempt
	if err := os.Rename(stage, dir); err != nil {
		return nil, fmt.Errorf("move kernel into the cache: %w", err)
	}
	return loadKernel(dir)
}

func loadKernel(dir string) (*Kernel, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kernel.meta"))
	if err != nil {
		return nil, fmt.Errorf("kernel cache entry %s is damaged (delete it): %w", dir, err)
	}
	k := &Kernel{Package: filepath.Base(dir), Dir: dir, BzImage: filepath.Join(dir, "vmlinuz"), ModRoot: dir}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, _ := strings.Cut(sc.Text(), "=")
		switch key {
		case "release":
			k.Release = val
		case "order":
			k.LoadOrder = strings.Split(val, ",")
		}
	}
	if k.Release == "" || len(k.LoadOrder) == 0 {
		return nil, fmt.Errorf("kernel cache entry %s is damaged (delete it): bad kernel.meta", dir)
	}
	return k, nil
}

// moduleClosure reads a modules.dep and returns the module files needed for want, each after
// its dependencies, in the order of want otherwise.
func moduleClosure(depFile string, want []string) ([]string, error) {
	data, err := os.ReadFile(depFile)
	if err != nil {
		return nil, err
	}
	deps := map[string][]string{}
	byName := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		mod, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		byName[modName(mod)] = mod
	}
	var order []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(m string) {
		if seen[m] {
			return
		}
		seen[m] = true
		// modules.dep lists the full closure, nearest first: load from the far end.
		ds := deps[m]
		for i := len(ds) - 1; i >= 0; i-- {
			visit(ds[i])
		}
		order = append(order, m)
	}
	var missing []string
	for _, w := range want {
		m, ok := byName[w]
		if !ok {
			missing = append(missing, w)
			continue
		}
		visit(m)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("kernel has no module %s", strings.Join(missing, ", "))
	}
	return order, nil
}

func modName(path string) string {
	base := filepath.Base(path)
	base = strings.TrimSuffix(strings.TrimSuffix(base, ".xz"), ".ko")
	return strings.ReplaceAll(base, "-", "_")
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}
