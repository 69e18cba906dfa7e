package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// id prints the process's credentials as the kernel reports them, without /etc/passwd:
// "uid=1000 gid=3000 groups=2000,3000" (groups sorted as getgroups returns them; empty
// when the process has none).
func id() int {
	groups, err := syscall.Getgroups()
	if err != nil {
		return fail("getgroups: %v", err)
	}
	s := make([]string, len(groups))
	for i, g := range groups {
		s[i] = strconv.Itoa(g)
	}
	fmt.Printf("uid=%d gid=%d groups=%s\n", os.Getuid(), os.Getgid(), strings.Join(s, ","))
	return 0
}

// write creates or truncates file with text, printing "wrote FILE"; it exits 1 with the
// error when the write fails (a read-only root file system, no permission).
func write(file, text string) int {
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		return fail("%v", err)
	}
	fmt.Println("wrote", file)
	return 0
}

// stat prints "FILE MODE UID GID" for each file (MODE in octal with the setuid, setgid and
// sticky bits), without following a final symbolic link.
func stat(files []string) int {
	for _, f := range files {
		var st syscall.Stat_t
		if err := syscall.Lstat(f, &st); err != nil {
			return fail("%v", err)
		}
		fmt.Printf("%s %04o %d %d\n", f, st.Mode&0o7777, st.Uid, st.Gid)
	}
	return 0
}
