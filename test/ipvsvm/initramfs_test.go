package ipvsvm

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestInitramfsUnpacks writes an archive and unpacks it with busybox cpio (the newc reader
// closest to the kernel's): directories, contents, modes and symlinks must come back.
func TestInitramfsUnpacks(t *testing.T) {
	if _, err := exec.LookPath("busybox"); err != nil {
		if framework.InCI() {
			t.Fatal("needs busybox: apt-get install busybox-static")
		}
		t.Skip("needs busybox")
	}
	host := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(host, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	img := NewInitramfs()
	img.File("init", 0o755, []byte("#!/bin/sh\n"))
	img.File("lib/modules/6.1/kernel/a.ko", 0o644, []byte("odd length!")) // parents implied
	img.Dir("proc")
	img.Symlink("bin/sh", "busybox")
	if err := img.HostFile("bin/tool", host); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := img.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("busybox", "cpio", "-i", "-d")
	cmd.Dir, cmd.Stdin = out, zr
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("busybox cpio -i: %v\n%s", err, b)
	}
	check := func(p string, mode os.FileMode, data string) {
		t.Helper()
		st, err := os.Lstat(filepath.Join(out, p))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", p, st.Mode(), mode)
		}
		if data != "" {
			if got, _ := os.ReadFile(filepath.Join(out, p)); string(got) != data {
				t.Errorf("%s: %q, want %q", p, got, data)
			}
		}
	}
	check("init", 0o755, "#!/bin/sh\n")
	check("lib/modules/6.1/kernel/a.ko", 0o644, "odd length!")
	check("lib/modules/6.1", os.ModeDir|0o755, "")
	check("proc", os.ModeDir|0o755, "")
	check("bin/tool", 0o755, "#!/bin/sh\necho hi\n")
	if target, err := os.Readlink(filepath.Join(out, "bin/sh")); err != nil || target != "busybox" {
		t.Errorf("bin/sh -> %q, %v", target, err)
	}
}

func TestModuleClosure(t *testing.T) {
	dep := filepath.Join(t.TempDir(), "modules.dep")
	// modules.dep lists each module's whole dependency closure, nearest first.
	data := "kernel/ip_vs.ko: kernel/nf_conntrack.ko kernel/nf_defrag_ipv4.ko kernel/libcrc32c.ko\n" +
		"kernel/nf_conntrack.ko: kernel/nf_defrag_ipv4.ko kernel/libcrc32c.ko\n" +
		"kernel/nf_defrag_ipv4.ko:\n" +
		"kernel/libcrc32c.ko:\n" +
		"kernel/crc32c_generic.ko:\n" +
		"kernel/ip_vs_rr.ko: kernel/ip_vs.ko kernel/nf_conntrack.ko kernel/nf_defrag_ipv4.ko kernel/libcrc32c.ko\n"
	if err := os.WriteFile(dep, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := moduleClosure(dep, []string{"crc32c_generic", "ip_vs_rr", "ip_vs"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kernel/crc32c_generic.ko", "kernel/libcrc32c.ko", "kernel/nf_defrag_ipv4.ko", "kernel/nf_conntrack.ko", "kernel/ip_vs.ko", "kernel/ip_vs_rr.ko"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if _, err := moduleClosure(dep, []string{"ip_vs_nope"}); err == nil {
		t.Fatal("a missing module must be an error")
	}
}
