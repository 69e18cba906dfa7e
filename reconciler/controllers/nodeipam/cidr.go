package nodeipam

import (
	"fmt"
	"math/big"
	"net/netip"
	"sort"
)

// maxSubnetBits caps how many subnets one cluster CIDR may be split into (2^maxSubnetBits),
// so that subnet indexes fit in a uint64 and a typo like /8 with /64 nodes is refused.
const maxSubnetBits = 32

// span is an inclusive range of subnet indexes.
type span struct{ lo, hi uint64 }

// subnetCount is the number of /mask subnets in cluster.
func subnetCount(cluster netip.Prefix, mask int) uint64 {
	return uint64(1) << uint(mask-cluster.Bits())
}

// checkRange refuses cluster/mask combinations the allocator cannot serve.
func checkRange(cluster netip.Prefix, mask int) error {
	bits := cluster.Addr().BitLen()
	switch {
	case mask < cluster.Bits():
		return fmt.Errorf("node mask size /%d is larger than the cluster CIDR %s: use a mask size of at least %d", mask, cluster, cluster.Bits())
	case mask > bits:
		return fmt.Errorf("node mask size /%d is longer than an address (%d bits)", mask, bits)
	case mask-cluster.Bits() > maxSubnetBits:
		return fmt.Errorf("cluster CIDR %s split into /%d gives more than 2^%d subnets: use a longer cluster prefix or a shorter node mask", cluster, mask, maxSubnetBits)
	}
	return nil
}

// subnet returns the i-th /mask subnet of cluster.
func subnet(cluster netip.Prefix, mask int, i uint64) netip.Prefix {
	bits := cluster.Addr().BitLen()
	base := new(big.Int).SetBytes(cluster.Masked().Addr().AsSlice())
	off := new(big.Int).Lsh(new(big.Int).SetUint64(i), uint(bits-mask))
	b := new(big.Int).Add(base, off).FillBytes(make([]byte, bits/8))
	addr, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(addr, mask)
}

// index is the subnet index of addr inside cluster (addr must be inside cluster).
func index(cluster netip.Prefix, mask int, addr netip.Addr) uint64 {
	bits := cluster.Addr().BitLen()
	base := new(big.Int).SetBytes(cluster.Masked().Addr().AsSlice())
	a := new(big.Int).SetBytes(addr.AsSlice())
	return new(big.Int).Rsh(new(big.Int).Sub(a, base), uint(bits-mask)).Uint64()
}

// blocked is the range of subnet indexes that used covers, if it overlaps cluster at all.
// Any overlap blocks a subnet: a Node whose podCIDR was set by hand to an odd size must not
// share a single address with another Node's range.
func blocked(cluster netip.Prefix, mask int, used netip.Prefix) (span, bool) {
	used = used.Masked()
	if !used.Overlaps(cluster) {
		return span{}, false
	}
	n := subnetCount(cluster, mask)
	if used.Bits() <= cluster.Bits() {
		return span{0, n - 1}, true
	}
	lo := index(cluster, mask, used.Addr())
	if used.Bits() >= mask {
		return span{lo, lo}, true
	}
	return span{lo, lo + (uint64(1) << uint(mask-used.Bits())) - 1}, true
}

// NextFree returns the lowest /mask subnet of cluster that overlaps none of used, and false
// when the cluster CIDR is exhausted. It is pure: the caller gathers used from every Node.
func NextFree(cluster netip.Prefix, mask int, used []netip.Prefix) (netip.Prefix, bool) {
	cluster = cluster.Masked()
	if checkRange(cluster, mask) != nil {
		return netip.Prefix{}, false
	}
	var spans []span
	for _, u := range used {
		if s, ok := blocked(cluster, mask, u); ok {
			spans = append(spans, s)
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	next := uint64(0)
	for _, s := range spans {
		if s.lo > next {
			break
		}
		if s.hi >= next {
			if s.hi == ^uint64(0) {
				return netip.Prefix{}, false
			}
			next = s.hi + 1
		}
	}
	if next >= subnetCount(cluster, mask) {
		return netip.Prefix{}, false
	}
	return subnet(cluster, mask, next), true
}
