package nftconn

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/google/nftables"
)

// elemChunk is how many set elements Elems puts in one message, so that their netlink
// attribute stays under the 64 KiB one can hold.
const elemChunk = 256

// Batch accumulates one netlink transaction on one table. Queuing keeps the first error in
// Err (Flush returns it instead of sending), and Sets holds the sets added in this
// transaction by name: rules that look one up must name it by the ID it was created with.
type Batch struct {
	C     *nftables.Conn
	Table *nftables.Table
	Sets  map[string]*nftables.Set
	Err   error
}

// NewBatch starts a transaction on tbl through c. c may be nil for a batch that only names
// objects (to count the rules a chain should hold, say) and never queues anything.
func NewBatch(c *nftables.Conn, tbl *nftables.Table) *Batch {
	return &Batch{C: c, Table: tbl, Sets: map[string]*nftables.Set{}}
}

// Fail records err unless an earlier error is recorded already; a nil err is ignored.
func (b *Batch) Fail(err error) {
	if b.Err == nil && err != nil {
		b.Err = err
	}
}

// Set is the set called name: the one added in this batch, else a reference by name to one
// the kernel holds.
func (b *Batch) Set(name string) *nftables.Set {
	if s, ok := b.Sets[name]; ok {
		return s
	}
	return &nftables.Set{Table: b.Table, Name: name}
}

// Chain is a reference by name to a chain of the table.
func (b *Batch) Chain(name string) *nftables.Chain {
	return &nftables.Chain{Name: name, Table: b.Table}
}

// ReplaceTable queues the replacement of the table by an empty one: add (a no-op if
// present) + delete + add is one transaction whether or not the table exists.
func (b *Batch) ReplaceTable() {
	b.C.AddTable(b.Table)
	b.C.DelTable(b.Table)
	b.C.AddTable(b.Table)
}

// AddSet queues s, in the batch's table, with its first elements els, and registers it in
// Sets so that Set finds it.
func (b *Batch) AddSet(s *nftables.Set, els []nftables.SetElement) {
	s.Table = b.Table
	b.Fail(b.C.AddSet(s, els))
	b.Sets[s.Name] = s
}

// Elems queues the addition (or with del, the deletion) of els to the set called name, in
// chunks of elemChunk.
func (b *Batch) Elems(name string, els []nftables.SetElement, del bool) {
	s := b.Set(name)
	for i := 0; i < len(els); i += elemChunk {
		j := min(i+elemChunk, len(els))
		if del {
			b.Fail(b.C.SetDeleteElements(s, els[i:j]))
		} else {
			b.Fail(b.C.SetAddElements(s, els[i:j]))
		}
	}
}

// Flush sends the transaction, or returns the first error met while queuing it (then
// nothing is sent).
func (b *Batch) Flush() error {
	if b.Err != nil {
		return b.Err
	}
	return b.C.Flush()
}

// IPv4Bytes is the 4-byte form of an IPv4 address, as set keys and comparisons hold it. It
// panics on an IPv6 address.
func IPv4Bytes(a netip.Addr) []byte {
	b := a.As4()
	return b[:]
}

// SortedKeys returns the keys of m in order, so that batches are built deterministically.
func SortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// LastAddr is the last IPv4 address of p, the end of its range in an interval set.
func LastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	if p.Bits() < 32 {
		v |= (uint32(1) << (32 - p.Bits())) - 1
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
