package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/internal/devsite"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// TestUninstallLeavesNothing is the acceptance of `flotilla install`, `flotilla status` and
// `flotilla uninstall` (and so of `flotilla reset`, whose cleanup uninstall shares): a 2-host
// site (so each host has routes to the other's pod CIDR) runs a Deployment per host, a Service
// and a NetworkPolicy; uninstalling a host must leave its network namespace, the machine's
// mounts, cgroups and processes as they were before it was installed.
func TestUninstallLeavesNothing(t *testing.T) {
	s := newSite(t, 2)
	sideLoad(t, s)
	h1, h2 := s.Hosts[0], s.Hosts[1]
	bin := framework.FlotillaBin(t)
	cgroupRootsBefore := cgroupDirs("flotilla")
	before := map[string]hostState{h1.Name: stateOf(h1), h2.Name: stateOf(h2)}
	machineMounts := flotillaMounts(filepath.Dir(h1.DataDir))

	// Install host-2 as a service. systemd cannot run here (no systemd as PID 1 in the test
	// machine or container): install writes the unit, says so, and the test starts the agent
	// itself with the unit's command line, as systemd would.
	unitDir := t.TempDir()
	out, err := flotillaInNetNS(h2, bin, "install", "--unit-dir", unitDir, "--data-dir", h2.DataDir, "--name", h2.Name, "--",
		"--listen-address", h2.IP, "--token-file", h1.TokenFile(), "--join", h1.GossipAddr(), "--git-min-interval=1s")
	if err != nil {
		t.Fatalf("flotilla install: %v\n%s", err, out)
	}
	if !strings.Contains(out, "systemd is not running") {
		t.Fatalf("install should say systemd is not running here:\n%s", out)
	}
	unit, err := os.ReadFile(filepath.Join(unitDir, "flotilla.service"))
	if err != nil {
		t.Fatalf("install wrote no unit: %v\n%s", err, out)
	}
	wantExec := fmt.Sprintf("agent --data-dir %s --name %s --listen-address %s --token-file %s --join %s", h2.DataDir, h2.Name, h2.IP, h1.TokenFile(), h1.GossipAddr())
	if !strings.Contains(string(unit), wantExec) || !strings.Contains(string(unit), "KillMode=process") {
		t.Fatalf("unit should run %q with KillMode=process:\n%s", wantExec, unit)
	}

	startSite(t, s)
	waitFor(t, 2*time.Minute, "2 Ready nodes", func() (bool, string) {
		got, out := readyNodes(h1)
		return got == 2, out
	})
	if _, err := h1.Kubectl(context.Background(), uninstallWorkload, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "a Running web pod on each host", func() (bool, string) {
		out, err := h1.Kubectl(context.Background(), "", "get", "pods", "-l", "app=web", "--no-headers", "-o", "custom-columns=N:.spec.nodeName,P:.status.phase")
		return err == nil && strings.Contains(out, h1.Name+" ") && strings.Contains(out, h2.Name+" ") && strings.Count(out, "Running") == 2, fmt.Sprint(out, err)
	})
	for _, h := range s.Hosts {
		other := h1
		if h == h1 {
			other = h2
		}
		waitFor(t, time.Minute, h.Name+": Service and NetworkPolicy tables, bridge, a route to "+other.Name+"'s pods", func() (bool, string) {
			st := stateOf(h)
			return st.has("table ip flotilla") && st.has("table ip flotilla-netpol") && st.has("link flotilla0") &&
				st.has("via "+other.IP) && st.has("cgroup /"), strings.Join(st.lines, "\n")
		})
		if st := stateOf(h); !st.has("mount ") {
			t.Fatalf("%s: no mounts under its data directory while pods run:\n%s", h.Name, strings.Join(st.lines, "\n"))
		}
	}

	// Status of the first host: it leads both elections and runs its pod.
	var status map[string]string
	waitFor(t, time.Minute, "flotilla status of "+h1.Name+" naming its role, site, elections and pod", func() (bool, string) {
		out, err := exec.Command(bin, "status", "--data-dir", h1.DataDir).CombinedOutput()
		status = keyValues(string(out))
		return err == nil && status["role"] == "voter" && status["etcd"] == "member" && status["site"] == h1.Name &&
			status["leader of"] == "controllers, scheduler" && strings.Contains(status["pods"], "Running") &&
			strings.HasPrefix(status["agent"], fmt.Sprintf("running (pid %d)", h1.PID())), fmt.Sprint(string(out), err)
	})
	t.Logf("flotilla status:\n%s", formatKV(status))
	// A second agent on a data directory in use is refused before it touches anything.
	second, cancelSecond := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelSecond()
	if out, err := exec.CommandContext(second, "nsenter", "--net=/run/netns/"+h1.NetNS, bin, "agent", "--data-dir", h1.DataDir, "--name", h1.Name,
		"--listen-address", h1.IP).CombinedOutput(); err == nil || !strings.Contains(string(out), fmt.Sprintf("another agent (pid %d) runs on the data directory", h1.PID())) {
		t.Fatalf("a second agent on %s: %v\n%s\nwant it refused, naming pid %d", h1.DataDir, err, out, h1.PID())
	}

	// Uninstall host-2 in its namespace, where the unit would run it.
	out, err = flotillaInNetNS(h2, bin, "uninstall", "--data-dir", h2.DataDir, "--name", h2.Name, "--unit-dir", unitDir)
	if err != nil {
		t.Fatalf("flotilla uninstall: %v\n%s", err, out)
	}
	t.Logf("flotilla uninstall:\n%s", out)
	if h2.Running() {
		t.Fatalf("%s's agent still runs after uninstall", h2.Name)
	}
	if left := before[h2.Name].diff(stateOf(h2)); left != "" {
		t.Fatalf("uninstall of %s left the host different from before install:\n%s", h2.Name, left)
	}
	for _, p := range []string{h2.DataDir, filepath.Join(unitDir, "flotilla.service")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s should be gone after uninstall: %v", p, err)
		}
	}
	if out, err := flotillaInNetNS(h2, bin, "uninstall", "--data-dir", h2.DataDir, "--name", h2.Name, "--unit-dir", unitDir); err != nil {
		t.Fatalf("a second uninstall should find nothing to do and succeed: %v\n%s", err, out)
	}

	// host-1 with --keep-data: the same cleanup, its data directory stays.
	out, err = flotillaInNetNS(h1, bin, "uninstall", "--data-dir", h1.DataDir, "--name", h1.Name, "--unit-dir", unitDir, "--keep-data")
	if err != nil {
		t.Fatalf("flotilla uninstall --keep-data: %v\n%s", err, out)
	}
	if left := before[h1.Name].diff(stateOf(h1)); left != "" {
		t.Fatalf("uninstall of %s left the host different from before:\n%s", h1.Name, left)
	}
	if _, err := os.Stat(filepath.Join(h1.DataDir, "cluster.json")); err != nil {
		t.Fatalf("--keep-data should keep the data directory: %v", err)
	}
	out2, err := exec.Command(bin, "status", "--data-dir", h1.DataDir, "--timeout", "2s").CombinedOutput()
	st := keyValues(string(out2))
	if err != nil || !strings.HasPrefix(st["agent"], "not running") || st["role"] != "voter" {
		t.Fatalf("status of a stopped host should say the agent is not running and still read its role from disk: %v\n%s", err, out2)
	}

	if left := diffLines(machineMounts, flotillaMounts(filepath.Dir(h1.DataDir))); left != "" {
		t.Errorf("mounts left on the machine:\n%s", left)
	}
	if left := diffLines(cgroupRootsBefore, cgroupDirs("flotilla")); left != "" {
		t.Errorf("cgroup parents of the hosts, after both were uninstalled:\n%s", left)
	}
}

// uninstallWorkload puts a pod with a memory emptyDir (a mount) on each host, a Service in
// front of them and a NetworkPolicy isolating them.
var uninstallWorkload = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {matchLabels: {app: web}}}]}]
` + uninstallWeb + uninstallWeb2

const uninstallWeb = `---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web-host-1, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: web, host: host-1}}
  template:
    metadata: {labels: {app: web, host: host-1}}
    spec:
      nodeSelector: {kubernetes.io/hostname: host-1}
      terminationGracePeriodSeconds: 2
      containers: [{name: hello, image: flotilla.local/hello:latest, imagePullPolicy: IfNotPresent, volumeMounts: [{name: scratch, mountPath: /scratch}]}]
      volumes: [{name: scratch, emptyDir: {medium: Memory}}]
`

var uninstallWeb2 = strings.ReplaceAll(uninstallWeb, "host-1", "host-2")

// hostState is what a host's agent may change on the machine, one line per thing: its network
// namespace's links, addresses, routes and nftables tables, the mounts under its data
// directory, its cgroups and the processes naming its data directory.
type hostState struct{ lines []string }

func (s hostState) has(sub string) bool {
	for _, l := range s.lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// diff lists what is in now and not in s (left behind) and what was in s and is gone.
func (s hostState) diff(now hostState) string { return diffLines(s.lines, now.lines) }

func diffLines(before, after []string) string {
	was := map[string]bool{}
	for _, l := range before {
		was[l] = true
	}
	is := map[string]bool{}
	var out []string
	for _, l := range after {
		is[l] = true
		if !was[l] {
			out = append(out, "left behind: "+l)
		}
	}
	for _, l := range before {
		if !is[l] {
			out = append(out, "gone (existed before): "+l)
		}
	}
	return strings.Join(out, "\n")
}

func stateOf(h *devsite.Host) hostState {
	var lines []string
	cmd := func(prefix string, name string, args ...string) {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			lines = append(lines, fmt.Sprintf("error %s %v: %v %s", name, args, err, out))
			return
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, prefix+l)
			}
		}
	}
	// Links by name and kind (counters and flags change by themselves).
	out, _ := exec.Command("ip", "-n", h.NetNS, "-o", "link", "show").CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 2 {
			lines = append(lines, "link "+strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
		}
	}
	out, _ = exec.Command("ip", "-n", h.NetNS, "-o", "addr", "show").CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 3 {
			lines = append(lines, "addr "+f[1]+" "+f[2]+" "+f[3])
		}
	}
	cmd("route ", "ip", "-n", h.NetNS, "-4", "route", "show", "table", "all")
	cmd("route6 ", "ip", "-n", h.NetNS, "-6", "route", "show", "table", "all")
	cmd("", "ip", "netns", "exec", h.NetNS, "nft", "list", "tables")
	for _, m := range flotillaMounts(h.DataDir) {
		lines = append(lines, "mount "+m)
	}
	for _, dir := range cgroupDirs("flotilla/" + h.Name) {
		_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				lines = append(lines, "cgroup "+p)
			}
			return nil
		})
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		c := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(c, h.DataDir+" ") || strings.Contains(c, h.DataDir+"/") {
			lines = append(lines, "process "+c)
		}
	}
	// The kernel gives the site's own eth0 its IPv6 link-local address (and local route) some
	// time after devsite brings it up: not the agent's doing, and maybe not there yet before.
	kept := lines[:0]
	for _, l := range lines {
		if !(strings.Contains(l, "fe80") && strings.Contains(l, "eth0")) {
			kept = append(kept, l)
		}
	}
	sort.Strings(kept)
	return hostState{kept}
}

// cgroupDirs is rel in every cgroup hierarchy (v1: one per controller) and the unified one,
// where it exists.
func cgroupDirs(rel string) []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + rel)
	if _, err := os.Stat("/sys/fs/cgroup/" + rel); err == nil {
		dirs = append(dirs, "/sys/fs/cgroup/"+rel)
	}
	return dirs
}

// flotillaMounts are the mount points under dir.
func flotillaMounts(dir string) []string {
	b, _ := os.ReadFile("/proc/mounts")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && strings.HasPrefix(f[1], dir+"/") {
			out = append(out, f[1]+" "+f[2])
		}
	}
	sort.Strings(out)
	return out
}

// flotillaInNetNS runs the flotilla binary in h's network namespace (and the machine's mount
// namespace), as the agent runs.
func flotillaInNetNS(h *devsite.Host, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + h.NetNS, bin}, args...)...).CombinedOutput()
	return string(out), err
}

// keyValues parses `flotilla status`.
func keyValues(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}

func formatKV(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, m[k])
	}
	return b.String()
}
