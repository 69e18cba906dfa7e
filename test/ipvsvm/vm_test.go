package ipvsvm

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// guestRun selects the tests of proxy/services (built with -tags ipvsvm) run in the guest.
const guestRun = "^(TestIPVSConformance|TestIPVSKernel|TestIPVSRunAutoMode|TestIPVSNetworkPolicy)$"

const (
	markStart = "FLOTILLA-GUEST-START"
	markExit  = "FLOTILLA-GUEST-EXIT="
)

// requireTools fails in CI, and skips elsewhere, when the host cannot build and boot the VM.
func requireTools(t *testing.T) string {
	t.Helper()
	var missing []string
	for _, bin := range []string{"qemu-system-x86_64", "busybox", "apt-get", "apt-cache", "dpkg-deb", "ip", "nft", "ldd", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	bb, err := exec.LookPath("busybox")
	if err == nil && !isStatic(bb) {
		missing = append(missing, "a static busybox ("+bb+" is dynamically linked)")
	}
	if len(missing) == 0 {
		return bb
	}
	msg := "the IPVS VM test needs " + strings.Join(missing, ", ") +
		": apt-get install --no-install-recommends qemu-system-x86 busybox-static iproute2 nftables (and Go)"
	if framework.InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// cacheRoot is where kernels are kept between runs, outside the repository.
func cacheRoot(t *testing.T) string {
	if d := os.Getenv("FLOTILLA_IPVSVM_CACHE"); d != "" {
		return d
	}
	d := "/var/cache/flotilla-test/ipvsvm"
	if err := os.MkdirAll(d, 0o755); err == nil {
		if f, err := os.CreateTemp(d, ".probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return d
		}
	}
	uc, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("no writable cache folder for the kernel: set FLOTILLA_IPVSVM_CACHE")
	}
	return filepath.Join(uc, "flotilla-test", "ipvsvm")
}

func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Clean(filepath.Join(wd, "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "proxy", "services")); err != nil {
		t.Fatalf("repository root not found from %s: %v", wd, err)
	}
	return root
}

// buildGuestTests compiles proxy/services' tests, including the ipvsvm ones, statically.
func buildGuestTests(ctx context.Context, t *testing.T, out string) {
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-tags", "ipvsvm", "-ldflags", "-s -w", "-o", out, "./proxy/services")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the guest test binary: %v\n%s", err, b)
	}
}

var lddPath = regexp.MustCompile(`(/[^ ]+) \(0x`)

// addHostBinary adds a dynamically linked host tool and the libraries ldd names for it.
func addHostBinary(t *testing.T, img *Initramfs, name, dst string) {
	src, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := img.HostFile(dst, src); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ldd", src).CombinedOutput()
	if err != nil {
		t.Fatalf("ldd %s: %v\n%s", src, err, out)
	}
	for _, m := range lddPath.FindAllStringSubmatch(string(out), -1) {
		if !img.Has(m[1]) {
			if err := img.HostFile(m[1], m[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// guestApplets are the busybox applets the init script and the tests use.
var guestApplets = []string{"sh", "mount", "mkdir", "insmod", "modprobe", "sysctl", "nsenter", "cat", "echo", "reboot", "poweroff", "sleep", "uname", "ln", "ls", "dmesg"}

func assemble(t *testing.T, k *Kernel, busybox, guestBin, run string) *Initramfs {
	img := NewInitramfs()
	for _, d := range []string{"proc", "sys", "dev", "run", "tmp", "etc", "sbin"} {
		img.Dir(d)
	}
	img.Symlink("var/run", "/run")
	if err := img.HostFile("bin/busybox", busybox); err != nil {
		t.Fatal(err)
	}
	for _, a := range guestApplets {
		img.Symlink("bin/"+a, "busybox")
	}
	img.Symlink("sbin/modprobe", "/bin/busybox")
	addHostBinary(t, img, "ip", "bin/ip")
	addHostBinary(t, img, "nft", "bin/nft")
	modDir := "lib/modules/" + k.Release
	for _, m := range k.LoadOrder {
		if err := img.HostFile(modDir+"/"+m, filepath.Join(k.ModRoot, modDir, m)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"modules.dep", "modules.alias", "modules.symbols", "modules.builtin", "modules.order"} {
		if p := filepath.Join(k.ModRoot, modDir, f); fileExists(p) {
			if err := img.HostFile(modDir+"/"+f, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := img.HostFile("services.test", guestBin); err != nil {
		t.Fatal(err)
	}
	var s strings.Builder
	s.WriteString("#!/bin/sh\n")
	s.WriteString("export PATH=/bin:/sbin LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/lib64 HOME=/tmp TMPDIR=/tmp\n")
	s.WriteString("mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev\n")
	s.WriteString("mount -t tmpfs run /run; mount -t tmpfs tmp /tmp; mkdir -p /run/netns\n")
	for _, m := range k.LoadOrder {
		fmt.Fprintf(&s, "insmod /%s/%s || echo 'insmod %s failed'\n", modDir, m, m)
	}
	// CI is passed on so the guest tests fail (not skip) on a missing prerequisite there.
	fmt.Fprintf(&s, "echo %s\n", markStart)
	fmt.Fprintf(&s, "CI=%s /services.test -test.v -test.count=1 -test.timeout=150s -test.run '%s' 2>&1\n", os.Getenv("CI"), run)
	fmt.Fprintf(&s, "echo %s$?\n", markExit)
	s.WriteString("reboot -f\n")
	img.File("init", 0o755, []byte(s.String()))
	return img
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// boot runs the VM until the guest prints its exit mark (or ctx ends) and returns the serial
// console output and the guest tests' exit code (-1: none seen).
func boot(ctx context.Context, t *testing.T, k *Kernel, initrd string) (string, int) {
	// The default pc machine with the bzImage, not -M microvm with the uncompressed kernel:
	// microvm boots in ~3 s on an idle machine but, under TCG on a loaded one, often hangs
	// for good after "tsc: Marking TSC unstable" (no timer to calibrate against); pc takes
	// ~5-10 s and has not hung.
	// -nic none: the guest gets no network device at all; its traffic stays in its own
	// namespaces.
	args := []string{"-accel", "tcg", "-m", "1024", "-smp", "2", "-nographic", "-no-reboot", "-nic", "none",
		"-kernel", k.BzImage, "-initrd", initrd, "-append", "console=ttyS0 panic=-1 quiet loglevel=3"}
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	cmd.Stdin = nil
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	pw.Close()
	var mu sync.Mutex
	var out bytes.Buffer
	code := -1
	sawExit := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			mu.Lock()
			out.WriteString(line + "\n")
			if rest, ok := strings.CutPrefix(line, markExit); ok {
				fmt.Sscanf(rest, "%d", &code)
				once.Do(func() { close(sawExit) })
			}
			mu.Unlock()
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-sawExit:
		// The guest reboots (and qemu exits, -no-reboot); do not wait for it forever.
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
		}
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-waited
	}
	pr.Close()
	mu.Lock()
	defer mu.Unlock()
	return out.String(), code
}

// TestIPVSInVM boots a Debian kernel with ip_vs under qemu (software emulation) and runs the
// IPVS backend's integration tests and the shared dataplane conformance table inside it.
func TestIPVSInVM(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the VM image is amd64")
	}
	busybox := requireTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	start := time.Now()
	k, err := FetchKernel(ctx, cacheRoot(t), t.Logf)
	if err != nil {
		msg := fmt.Sprintf("fetch the kernel: %v (needs apt-get download of %s: apt-get update, network to the Debian mirror)", err, KernelMeta)
		if framework.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Logf("kernel %s (%s), ready in %s", k.Package, k.Release, time.Since(start).Round(time.Millisecond))

	dir := t.TempDir()
	guest := filepath.Join(dir, "services.test")
	buildStart := time.Now()
	buildGuestTests(ctx, t, guest)
	run := guestRun
	if r := os.Getenv("FLOTILLA_IPVSVM_RUN"); r != "" {
		run = r
	}
	img := assemble(t, k, busybox, guest, run)
	initrd := filepath.Join(dir, "initrd.gz")
	f, err := os.Create(initrd)
	if err != nil {
		t.Fatal(err)
	}
	size, err := img.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("write initramfs: %v", err)
	}
	t.Logf("guest binary and %d MiB initramfs built in %s", size>>20, time.Since(buildStart).Round(time.Millisecond))
	if keep := os.Getenv("FLOTILLA_IPVSVM_KEEP"); keep != "" {
		// For debugging by hand: qemu-system-x86_64 -accel tcg -M microvm -nographic ...
		if err := os.Rename(initrd, keep); err != nil {
			t.Fatal(err)
		}
		t.Skipf("initramfs kept at %s (FLOTILLA_IPVSVM_KEEP)", keep)
	}

	vmStart := time.Now()
	out, code := boot(ctx, t, k, initrd)
	took := time.Since(vmStart).Round(100 * time.Millisecond)
	msg := fmt.Sprintf("IPVS VM run took %s (qemu -accel tcg, pc machine, bzImage; whole test %s)", took, time.Since(start).Round(100*time.Millisecond))
	t.Log(msg)
	fmt.Fprintln(os.Stderr, msg)
	_ = os.WriteFile(filepath.Join(cacheRoot(t), "last-run.txt"), []byte(msg+"\n"), 0o644)

	switch {
	case !strings.Contains(out, markStart):
		t.Fatalf("the guest never started its tests (exit mark %d); console:\n%s", code, out)
	case code != 0:
		t.Fatalf("guest tests failed (exit %d); console:\n%s", code, out)
	}
	// A guest that ran nothing would pass silently: require every test to have passed.
	for _, name := range []string{"TestIPVSConformance", "TestIPVSKernel", "TestIPVSRunAutoMode", "TestIPVSNetworkPolicy"} {
		if run == guestRun && !strings.Contains(out, "--- PASS: "+name+" ") {
			t.Fatalf("%s did not pass in the guest; console:\n%s", name, out)
		}
	}
	if testing.Verbose() {
		t.Logf("guest console:\n%s", out)
	}
}
