// Package devsite builds a site of flotilla hosts on one machine: each host is a network
// namespace on a private bridge that has no route off the machine, running `flotilla agent`.
// `flotilla dev` (and so `make demo`) and the multi-host tests in test/e2e use it.
//
// Agents are started with `nsenter --net=/run/netns/<host>`, not `ip netns exec`: nsenter
// changes only the network namespace, whereas `ip netns exec` also gives the process a mount
// namespace of its own. The agent's mounts (the bind mounts that pin its pods' network
// namespaces, containerd's mounts) must stay in the machine's mount namespace, where a
// restarted agent and `flotilla reset` find them.
//
// Everything a site creates (namespaces, links, routes, processes, containers) is removed by
// Close; Save and Load let another process (`flotilla dev down`) find the site again.
package devsite

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// blackholed are the pod and service ranges: while a site runs, the root namespace drops them
// so a missing rule can never send such packets off the machine.
var blackholed = []string{"10.244.0.0/16", "10.96.0.0/12"}

// Options configure a site.
type Options struct {
	// Hosts is how many hosts to create (not start).
	Hosts int
	// Dir holds the hosts' data directories and logs.
	Dir string
	// Bin is the flotilla binary the hosts run (agent) and Close runs (reset); Kubectl is
	// the kubectl binary Host.Kubectl runs.
	Bin, Kubectl string
	// Detach starts agents in their own session so they outlive this process (`flotilla dev
	// up`); otherwise they die with it.
	Detach bool
}

// Site is a set of hosts on a private bridge.
type Site struct {
	opts   Options
	prefix string
	subnet string // "10.213.N"
	bridge string
	Hosts  []*Host
	// routes are the blackhole routes this site added (and removes).
	routes []string
}

// Host is one simulated machine.
type Host struct {
	Index   int
	Name    string
	NetNS   string
	IP      string
	DataDir string
	Veth    string
	site    *Site

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	args   []string
	// pid is the agent's process, also for a site loaded from its state file.
	pid int
	// bin replaces Options.Bin for this host's next starts (UseBinary).
	bin string
}

// Preflight reports what the machine lacks for a site: root, ip (iproute2), nsenter
// (util-linux).
func Preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("creating network namespaces needs root: run as root (e.g. with sudo)")
	}
	for _, c := range []struct{ cmd, pkg string }{{"ip", "iproute2"}, {"nsenter", "util-linux"}} {
		if _, err := exec.LookPath(c.cmd); err != nil {
			return fmt.Errorf("%s is not on PATH: install %s (Debian package %s)", c.cmd, c.pkg, c.pkg)
		}
	}
	return nil
}

// New creates the bridge and the hosts' namespaces.
func New(opts Options) (*Site, error) {
	if err := Preflight(); err != nil {
		return nil, err
	}
	if opts.Hosts < 1 {
		return nil, fmt.Errorf("a site needs at least 1 host, got Options.Hosts=%d", opts.Hosts)
	}
	if opts.Bin == "" || opts.Dir == "" {
		return nil, errors.New("set both the flotilla binary (Options.Bin) and the data directory (Options.Dir)")
	}
	id := randHex(2)
	n, _ := rand.Int(rand.Reader, big.NewInt(subnetCount))
	subnet, err := freeSubnet(subnetsInUse(), int(n.Int64()))
	if err != nil {
		return nil, err
	}
	s := &Site{opts: opts, prefix: "fl" + id, subnet: subnet}
	s.bridge = s.prefix + "br"
	if err := s.setup(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Sites live on 10.213.N.0/24, N from subnetFirst on.
const subnetFirst, subnetCount = 20, 200

// freeSubnet is the first of the sites' subnets, from the start-th on (wrapping around), that
// no interface of this machine has an address in: a bridge left by a site whose process was
// killed, or another site, would otherwise take the route to the new site's hosts.
func freeSubnet(inUse map[string]bool, start int) (string, error) {
	for i := range subnetCount {
		subnet := fmt.Sprintf("10.213.%d", subnetFirst+(start+i)%subnetCount)
		if !inUse[subnet] {
			return subnet, nil
		}
	}
	return "", fmt.Errorf("every subnet 10.213.%d-%d.0/24 has an address on this machine: remove the bridges of old sites (fl*br in `ip link`, `ip link del NAME`)", subnetFirst, subnetFirst+subnetCount-1)
}

// subnetsInUse lists the "10.213.N" prefixes of the addresses of this machine's interfaces
// (in the caller's network namespace).
func subnetsInUse() map[string]bool {
	used := map[string]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return used
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := ipn.IP.To4(); ip4 != nil && ip4[0] == 10 && ip4[1] == 213 {
			used[fmt.Sprintf("10.213.%d", ip4[2])] = true
		}
	}
	return used
}

func (s *Site) setup() error {
	if err := run("ip", "link", "add", s.bridge, "type", "bridge"); err != nil {
		return err
	}
	// The root namespace gets .254 so this machine (kubectl, a browser, the tests) can reach
	// the hosts; the hosts have no default route, so nothing they send can leave the machine.
	if err := run("ip", "addr", "add", s.subnet+".254/24", "dev", s.bridge); err != nil {
		return err
	}
	if err := run("ip", "link", "set", s.bridge, "up"); err != nil {
		return err
	}
	for _, cidr := range blackholed {
		if err := run("ip", "route", "add", "blackhole", cidr); err == nil {
			s.routes = append(s.routes, cidr)
		}
	}
	for i := 1; i <= s.opts.Hosts; i++ {
		h := &Host{Index: i, Name: fmt.Sprintf("host-%d", i), NetNS: fmt.Sprintf("%s-h%d", s.prefix, i),
			IP: fmt.Sprintf("%s.%d", s.subnet, i), DataDir: filepath.Join(s.opts.Dir, fmt.Sprintf("host-%d", i)),
			Veth: fmt.Sprintf("%sv%d", s.prefix, i), site: s}
		if err := os.MkdirAll(h.DataDir, 0o700); err != nil {
			return err
		}
		if err := run("ip", "netns", "add", h.NetNS); err != nil {
			return err
		}
		s.Hosts = append(s.Hosts, h)
		steps := [][]string{
			{"ip", "link", "add", h.Veth, "type", "veth", "peer", "name", "eth0", "netns", h.NetNS},
			{"ip", "link", "set", h.Veth, "master", s.bridge},
			{"ip", "link", "set", h.Veth, "up"},
			{"ip", "-n", h.NetNS, "addr", "add", h.IP + "/24", "dev", "eth0"},
			{"ip", "-n", h.NetNS, "link", "set", "eth0", "up"},
			{"ip", "-n", h.NetNS, "link", "set", "lo", "up"},
		}
		for _, st := range steps {
			if err := run(st[0], st[1:]...); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close stops every agent and removes what New created: namespaces (and with them the
// veths), the bridge, the routes.
func (s *Site) Close() {
	for _, h := range s.Hosts {
		h.Kill()
	}
	for _, h := range s.Hosts {
		// Containers outlive their agent on purpose (edge autonomy); remove them, their
		// containerd and their mounts before the namespace goes. Reset runs in the host's
		// network namespace, where it also removes the bridge, routes and nftables tables.
		if s.opts.Bin == "" {
			fmt.Fprintf(os.Stderr, "devsite: %s: containers not removed, no flotilla binary (Options.Bin) to run reset with; run `flotilla reset --data-dir %s --name %s`\n", h.Name, h.DataDir, h.Name)
		} else if out, err := resetCommand(s.opts.Bin, h).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "devsite: %s reset --data-dir %s --name %s: %v\n%s", s.opts.Bin, h.DataDir, h.Name, err, out)
		}
		_ = run("ip", "netns", "del", h.NetNS)
		// Deleting the namespace normally takes the veth pair with it; a namespace still
		// pinned by a dying process would leave the root side behind.
		if exec.Command("ip", "link", "show", h.Veth).Run() == nil {
			_ = run("ip", "link", "del", h.Veth)
		}
	}
	_ = run("ip", "link", "del", s.bridge)
	for _, cidr := range s.routes {
		_ = run("ip", "route", "del", "blackhole", cidr)
	}
	s.Hosts, s.routes = nil, nil
}

// resetCommand runs `flotilla reset` for h in its network namespace, or, when that is gone,
// without touching any network.
func resetCommand(bin string, h *Host) *exec.Cmd {
	args := []string{"reset", "--data-dir", h.DataDir, "--name", h.Name}
	if _, err := os.Stat("/run/netns/" + h.NetNS); err != nil {
		return exec.Command(bin, append(args, "--network=false")...)
	}
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + h.NetNS, bin}, args...)...)
}

// GossipAddr is host:port of a host's gossip listener.
func (h *Host) GossipAddr() string { return h.IP + ":7946" }

// Kubeconfig is the host's kubeconfig (written once its API is ready).
func (h *Host) Kubeconfig() string { return filepath.Join(h.DataDir, "kubeconfig") }

// TokenFile is where the first host writes the site's join token.
func (h *Host) TokenFile() string { return filepath.Join(h.DataDir, "token") }

// LogFile is the agent's log.
func (h *Host) LogFile() string { return filepath.Join(h.site.opts.Dir, h.Name+".log") }

// Start starts the agent in the host's namespace. The first host of a site is started with
// no join; others join host 1 with its token unless args say otherwise. The site's local
// volumes live in its directory (<dir>/volumes), so that removing the site removes them.
func (h *Host) Start(extra ...string) error {
	args := []string{"agent", "--data-dir", h.DataDir, "--name", h.Name, "--listen-address", h.IP}
	if h.site.opts.Dir != "" {
		volumes, err := h.site.VolumeDir()
		if err != nil {
			return err
		}
		args = append(args, "--local-volume-path", volumes)
	}
	args = append(args, extra...)
	return h.startWith(args)
}

// StartJoining starts the agent joining the given hosts with host 1's token.
func (h *Host) StartJoining(seeds []*Host, extra ...string) error {
	args := []string{"--token-file", h.site.Hosts[0].TokenFile()}
	for _, s := range seeds {
		args = append(args, "--join", s.GossipAddr())
	}
	return h.Start(append(args, extra...)...)
}

func (h *Host) startWith(args []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd != nil {
		select {
		case <-h.exited:
		default:
			return fmt.Errorf("%s is already running (pid %d): stop it before starting it again", h.Name, h.pid)
		}
	}
	logf, err := os.OpenFile(h.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "\n==== %s start: %v\n", time.Now().Format(time.RFC3339), args)
	bin := h.site.opts.Bin
	if h.bin != "" {
		bin = h.bin
	}
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + h.NetNS, bin}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if h.site.opts.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	// Pdeathsig fires when the thread that started the child ends, not the process, and Go
	// ends a thread whose goroutine exits locked to it (as code entering a network namespace
	// does): start and wait on a thread locked for as long as the agent runs.
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	if err := <-started; err != nil {
		logf.Close()
		return err
	}
	h.cmd, h.args, h.pid = cmd, args, cmd.Process.Pid
	h.exited = done
	return nil
}

// UseBinary makes the host's next starts run bin instead of the site's binary, as an
// upgrade replaces the binary of one host at a time.
func (h *Host) UseBinary(bin string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bin = bin
}

// Restart starts the agent again with the arguments of its last start.
func (h *Host) Restart() error {
	h.mu.Lock()
	args := h.args
	h.mu.Unlock()
	return h.startWith(args)
}

// Running reports whether the agent process is alive.
func (h *Host) Running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return h.pid > 0 && syscall.Kill(h.pid, 0) == nil && isAgent(h.pid)
	}
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

// Kill ends the agent with SIGKILL (a crash, or the end of a test).
func (h *Host) Kill() {
	h.mu.Lock()
	cmd, exited, pid := h.cmd, h.exited, h.pid
	h.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		// A host of a site loaded from its state file: end the recorded agent, if it is
		// still that agent.
		if pid > 0 && isAgent(pid) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			for i := 0; i < 50 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(100 * time.Millisecond)
			}
			if isAgent(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return
	}
	// nsenter execs the agent, so the PID is the agent's.
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Stop ends the agent with SIGTERM and waits up to timeout.
func (h *Host) Stop(timeout time.Duration) error {
	h.mu.Lock()
	cmd, exited := h.cmd, h.exited
	h.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
		h.Kill()
		return fmt.Errorf("%s did not stop within %s", h.Name, timeout)
	}
}

// Partition cuts the host off from every other host (not from the machine, which talks to it
// through the bridge address .254). Heal undoes it.
func (h *Host) Partition() error {
	for _, o := range h.site.Hosts {
		if o == h {
			continue
		}
		// replace, not add: partitions of several hosts overlap.
		if err := run("ip", "-n", h.NetNS, "route", "replace", "prohibit", o.IP+"/32"); err != nil {
			return err
		}
		if err := run("ip", "-n", o.NetNS, "route", "replace", "prohibit", h.IP+"/32"); err != nil {
			return err
		}
	}
	return nil
}

// Heal reverses Partition.
func (h *Host) Heal() {
	for _, o := range h.site.Hosts {
		if o == h {
			continue
		}
		_ = run("ip", "-n", h.NetNS, "route", "del", "prohibit", o.IP+"/32")
		_ = run("ip", "-n", o.NetNS, "route", "del", "prohibit", h.IP+"/32")
	}
}

// PartitionAll cuts every host off from every other host; HealAll undoes it.
func (s *Site) PartitionAll() error {
	for _, h := range s.Hosts {
		if err := h.Partition(); err != nil {
			return err
		}
	}
	return nil
}

// HealAll reverses PartitionAll (and any Partition).
func (s *Site) HealAll() {
	for _, h := range s.Hosts {
		h.Heal()
	}
}

// WaitReady waits for the host's kubeconfig (its API answered /readyz).
func (h *Host) WaitReady(ctx context.Context) error {
	for {
		if _, err := os.Stat(h.Kubeconfig()); err == nil {
			return nil
		}
		if !h.Running() && h.exited != nil {
			return fmt.Errorf("%s exited before it was ready; log %s:\n%s", h.Name, h.LogFile(), tail(h.LogFile(), 30))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w; log %s:\n%s", h.Name, ctx.Err(), h.LogFile(), tail(h.LogFile(), 30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Kubectl runs the real kubectl against the host's API.
func (h *Host) Kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	if h.site.opts.Kubectl == "" {
		return "", errors.New("no kubectl binary: set Options.Kubectl")
	}
	cmd := exec.CommandContext(ctx, h.site.opts.Kubectl, append([]string{"--kubeconfig", h.Kubeconfig(), "--request-timeout=15s"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s on %s: %v: %s", strings.Join(args, " "), h.Name, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Logs returns the agent's log.
func (h *Host) Logs() string {
	b, _ := os.ReadFile(h.LogFile())
	return string(b)
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var keep []string
	for _, l := range lines {
		// klog info lines are noise here.
		if strings.HasPrefix(l, "I") && len(l) > 5 && l[1] >= '0' && l[1] <= '9' {
			continue
		}
		keep = append(keep, l)
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "\n")
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// MoveTo gives a stopped host a new address on the bridge (an edge host whose DHCP lease
// changed). Start it again afterwards.
func (h *Host) MoveTo(ip string) error {
	if h.Running() {
		return fmt.Errorf("%s is running; stop it before moving it", h.Name)
	}
	if err := run("ip", "-n", h.NetNS, "addr", "del", h.IP+"/24", "dev", "eth0"); err != nil {
		return err
	}
	if err := run("ip", "-n", h.NetNS, "addr", "add", ip+"/24", "dev", "eth0"); err != nil {
		return err
	}
	h.IP = ip
	return nil
}

// Subnet returns the site's /24 prefix without the last octet ("10.213.N").
func (s *Site) Subnet() string { return s.subnet }

// VolumeDir is the directory under which the site's hosts keep the volumes of the built-in
// class flotilla-local (--local-volume-path): <dir>/volumes, absolute.
func (s *Site) VolumeDir() (string, error) { return filepath.Abs(filepath.Join(s.opts.Dir, "volumes")) }

// isAgent reports whether pid is a flotilla agent (so a recycled PID is never signalled).
func isAgent(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	return len(args) > 1 && strings.HasSuffix(args[0], "flotilla") && args[1] == "agent"
}

type siteState struct {
	Prefix, Subnet, Bridge string
	Routes                 []string
	Hosts                  []hostState
	// Bin is the flotilla binary the hosts run (Options.Bin), for starting one again.
	Bin string `json:",omitempty"`
}

type hostState struct {
	Index                          int
	Name, NetNS, IP, DataDir, Veth string
	PID                            int
	Args                           []string
}

// Save writes what is needed to find and remove the site later (Load, then Close).
func (s *Site) Save(path string) error {
	st := siteState{Prefix: s.prefix, Subnet: s.subnet, Bridge: s.bridge, Routes: s.routes, Bin: s.opts.Bin}
	for _, h := range s.Hosts {
		h.mu.Lock()
		st.Hosts = append(st.Hosts, hostState{Index: h.Index, Name: h.Name, NetNS: h.NetNS, IP: h.IP, DataDir: h.DataDir, Veth: h.Veth, PID: h.pid, Args: h.args})
		h.mu.Unlock()
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// Load finds a site saved by Save. A zero opts.Bin is the binary the site was saved with.
func Load(path string, opts Options) (*Site, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err // errors.Is(err, os.ErrNotExist): no site was saved there
	}
	var st siteState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("site state %s is unreadable (%w): remove the site by hand (namespaces fl*-h* in `ip netns list`, bridge fl*br and veths fl*v* in `ip link`), then delete the file", path, err)
	}
	if opts.Bin == "" {
		opts.Bin = st.Bin
	}
	s := &Site{opts: opts, prefix: st.Prefix, subnet: st.Subnet, bridge: st.Bridge, routes: st.Routes}
	for _, hs := range st.Hosts {
		s.Hosts = append(s.Hosts, &Host{Index: hs.Index, Name: hs.Name, NetNS: hs.NetNS, IP: hs.IP, DataDir: hs.DataDir,
			Veth: hs.Veth, site: s, pid: hs.PID, args: hs.Args})
	}
	return s, nil
}

// PID is the agent's process ID (0 before Start).
func (h *Host) PID() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pid
}
