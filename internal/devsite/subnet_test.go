package devsite

import (
	"fmt"
	"strings"
	"testing"
)

// A new site never takes a subnet some interface of the machine already has: a bridge left
// by a killed test run with the same subnet took the route to a new site's hosts (no route
// to host from the machine, while the hosts reached each other).
func TestFreeSubnetSkipsSubnetsInUse(t *testing.T) {
	cases := []struct {
		inUse []string
		start int
		want  string
	}{
		{nil, 0, "10.213.20"},
		{[]string{"10.213.20"}, 0, "10.213.21"},
		{[]string{"10.213.157"}, 137, "10.213.158"},
		{[]string{"10.213.219"}, 199, "10.213.20"}, // wraps around
	}
	for _, c := range cases {
		inUse := map[string]bool{}
		for _, s := range c.inUse {
			inUse[s] = true
		}
		got, err := freeSubnet(inUse, c.start)
		if err != nil || got != c.want {
			t.Errorf("freeSubnet(%v, %d) = %q, %v; want %q", c.inUse, c.start, got, err, c.want)
		}
	}
	all := map[string]bool{}
	for n := subnetFirst; n < subnetFirst+subnetCount; n++ {
		all[fmt.Sprintf("10.213.%d", n)] = true
	}
	if got, err := freeSubnet(all, 5); err == nil || !strings.Contains(err.Error(), "ip link del") {
		t.Errorf("every subnet in use: got %q, %v; want an error saying what to remove", got, err)
	}
}
