// Command testapp is the process the runtime tests run in containers; its first argument picks
// a behaviour.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("usage: testapp exit3|exit N|oom|sigterm FILE|sleep|ifaces|cat")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "exit3":
		fmt.Println("hello stdout")
		fmt.Fprintln(os.Stderr, "hello stderr")
		fmt.Println("second line")
		os.Exit(3)
	case "exit":
		n, _ := strconv.Atoi(os.Args[2])
		fmt.Printf("exiting with %d\n", n)
		os.Exit(n)
	case "oom":
		var chunks [][]byte
		for i := 0; i < 100; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				b[j] = byte(j)
			}
			chunks = append(chunks, b)
		}
		fmt.Println("allocated", len(chunks), "MiB")
	case "sigterm":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("ready")
		<-c
		_ = os.WriteFile(os.Args[2], []byte("SIGTERM received\n"), 0o644)
		fmt.Println("SIGTERM received")
	case "sleep":
		fmt.Println("sleeping")
		time.Sleep(time.Hour)
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ignoring SIGTERM")
		time.Sleep(time.Hour)
	case "info":
		// Everything a securityContext or mount changes, one "key value" per line.
		host, _ := os.Hostname()
		wd, _ := os.Getwd()
		fmt.Println("uid", os.Getuid())
		fmt.Println("gid", os.Getgid())
		fmt.Println("hostname", host)
		fmt.Println("cwd", wd)
		fmt.Println("greeting", os.Getenv("GREETING"))
		status, _ := os.ReadFile("/proc/self/status")
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
				fmt.Println("capbnd", strings.TrimSpace(v))
			}
		}
		hosts, err := os.ReadFile("/etc/hosts")
		fmt.Printf("hosts %q %v\n", hosts, err)
		fmt.Println("rootfs-write", os.WriteFile("/written", []byte("x"), 0o644))
		fmt.Println("tmpfs-write", os.WriteFile("/scratch/written", []byte("x"), 0o644))
	case "ifaces":
		ifs, err := net.Interfaces()
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		for _, i := range ifs {
			fmt.Println("iface", i.Name)
		}
	case "cat":
		_, _ = io.Copy(os.Stdout, os.Stdin)
	default:
		fmt.Println("unknown mode", os.Args[1])
		os.Exit(2)
	}
}
