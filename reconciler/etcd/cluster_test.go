package etcd

import (
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestHasStandby(t *testing.T) {
	members := []*etcdserverpb.Member{{Name: "host-1"}, {Name: "host-2"}, {Name: "host-3"}}
	cases := []struct {
		alive []string
		want  bool
	}{
		{[]string{"host-1", "host-2"}, false},          // 3 hosts, one dead: nobody to take its place
		{[]string{"host-1", "host-2", "host-4"}, true}, // a standby is alive
		{nil, false},
	}
	for _, tc := range cases {
		if got := hasStandby(tc.alive, members); got != tc.want {
			t.Errorf("hasStandby(%v) = %v, want %v", tc.alive, got, tc.want)
		}
	}
}
