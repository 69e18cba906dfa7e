package network_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/nodes/network"
	"github.com/flotilla-dev/flotilla/test/framework"
)

// helperEnv makes the test binary act as an agent process (see TestMain): it runs one
// operation of the pod network in the network namespace it was started in and prints the result.
const helperEnv = "FLOTILLA_NETWORK_TEST_HELPER"

type helperResult struct {
	Pods    []string
	Network network.PodNetwork
	Found   bool
}

func TestMain(m *testing.M) {
	if op := os.Getenv(helperEnv); op != "" {
		if err := runHelper(op); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runHelper(op string) error {
	n, err := network.New(network.Config{PodCIDR: os.Getenv("POD_CIDR"), StateDir: os.Getenv("STATE_DIR")})
	if err != nil {
		return err
	}
	defer n.Close()
	ctx, uid := context.Background(), os.Getenv("POD_UID")
	var res helperResult
	switch op {
	case "setup":
		res.Network, err = n.SetupPod(ctx, uid, "default", "web")
		res.Found = err == nil
	case "find":
		res.Network, res.Found = n.PodNetwork(ctx, uid)
	case "teardown":
		err = n.TeardownPod(ctx, uid)
	default:
		err = fmt.Errorf("unknown op %q", op)
	}
	if err != nil {
		return err
	}
	if res.Pods, err = n.Pods(); err != nil {
		return err
	}
	b, _ := json.Marshal(res)
	fmt.Println("RESULT " + string(b))
	return nil
}

// agentOp runs one helper process inside the host namespace the way hosts run the agent:
// `nsenter --net=/run/netns/<host>`.
func agentOp(t *testing.T, host, stateDir, op string) helperResult {
	t.Helper()
	cmd := exec.Command("nsenter", "--net=/run/netns/"+host, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+op, "POD_CIDR=10.244.252.0/24", "STATE_DIR="+stateDir, "POD_UID=3f1c9a52-0000-4000-8000-00000000abcd")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent %s: %v\n%s", op, err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			var res helperResult
			if err := json.Unmarshal([]byte(line), &res); err != nil {
				t.Fatal(err)
			}
			return res
		}
	}
	t.Fatalf("agent %s printed no result:\n%s\n%s", op, out, stderr.String())
	return helperResult{}
}

// TestAgentProcessesUnderNsenter runs each step in a separate agent process entered into the
// host namespace with nsenter: the sandbox made by one process is found by the next (agent
// restart), still works, and a third process tears it down.
func TestAgentProcessesUnderNsenter(t *testing.T) {
	requireNetAdmin(t)
	if _, err := exec.LookPath("nsenter"); err != nil {
		if framework.InCI() {
			t.Fatalf("nsenter missing (util-linux)")
		}
		t.Skip("nsenter missing (util-linux)")
	}
	id := randID(t)
	host := newHost(t, id, "a")
	hostName := "flt-n" + id + "-a"
	stateDir := t.TempDir()
	t.Cleanup(func() {
		// A failed step may leave the sandbox: tear it down from the host namespace.
		n := startNetworkNoCleanup(t, host, stateDir)
		if n != nil {
			uids, _ := n.Pods()
			for _, uid := range uids {
				_ = n.TeardownPod(context.Background(), uid)
			}
			n.Close()
		}
	})

	made := agentOp(t, hostName, stateDir, "setup")
	if !made.Found || len(made.Network.IPs) != 1 || !made.Network.IPs[0].Equal(net.ParseIP("10.244.252.2")) {
		t.Fatalf("setup: %+v", made)
	}
	found := agentOp(t, hostName, stateDir, "find")
	if !found.Found || found.Network.NetNSPath != made.Network.NetNSPath || !found.Network.IPs[0].Equal(made.Network.IPs[0]) ||
		len(found.Pods) != 1 {
		t.Fatalf("a restarted agent did not find the sandbox: %+v, made %+v", found, made)
	}
	// The sandbox outlived both processes: the pod reaches its gateway on the host's bridge.
	if err := ping(openNS(t, found.Network.NetNSPath), net.ParseIP("10.244.252.1")); err != nil {
		t.Fatalf("pod -> gateway after the agent processes exited: %v", err)
	}
	again := agentOp(t, hostName, stateDir, "setup")
	if !again.Network.IPs[0].Equal(made.Network.IPs[0]) {
		t.Fatalf("setup in a new process gave %v, want %v", again.Network.IPs, made.Network.IPs)
	}
	gone := agentOp(t, hostName, stateDir, "teardown")
	if len(gone.Pods) != 0 {
		t.Fatalf("pods after teardown: %v", gone.Pods)
	}
	if _, err := os.Stat(made.Network.NetNSPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("netns still there: %v", err)
	}
}
