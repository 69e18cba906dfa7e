package membership

import (
	"testing"
	"time"
)

// TestBannedHostIsIgnored: a host removed from the site joins a member that bans it. Its
// alive messages are refused: the banning member never lists it, while a member without the
// ban does.
func TestBannedHostIsIgnored(t *testing.T) {
	a := startMember(t, "a")
	b := startMember(t, "b")
	c := startMember(t, "removed")
	a.SetBanned(func(name string) bool { return name == "removed" })
	if _, err := b.Join([]string{HostPort("127.0.0.1", a.cfg.BindPort)}, nil); err != nil {
		t.Fatal(err)
	}
	names := func(m *Membership) map[string]bool {
		out := map[string]bool{}
		for _, n := range m.ml.Members() {
			out[n.Name] = true
		}
		return out
	}
	// Join returns once b has a's state; a merges b's state after answering, in its own
	// goroutine. Wait for it, so that what a lists at the end is a's reaction to the ban.
	for deadline := time.Now().Add(10 * time.Second); !names(a)["b"]; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s a does not list b, which joined it: %v", names(a))
		}
	}
	// The banned host contacts both: b learns of it by the join's state exchange, not only
	// by gossip relayed at random (which could all go to a, which drops it).
	if _, err := c.Join([]string{HostPort("127.0.0.1", a.cfg.BindPort), HostPort("127.0.0.1", b.cfg.BindPort)}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.refused.Load() == 0 || !names(b)["removed"] {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d alive messages of the banned host refused by a, b knows %v", a.refused.Load(), names(b))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if names(a)["removed"] {
		t.Errorf("the banning member's memberlist holds the banned host: %v", names(a))
	}
	for _, m := range a.Members() {
		if m.Name == "removed" {
			t.Errorf("Members of the banning member lists the banned host: %+v", m)
		}
	}
	if !names(a)["b"] {
		t.Errorf("the banning member lost b: %v", names(a))
	}
}
