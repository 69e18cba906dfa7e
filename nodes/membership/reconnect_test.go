package membership

import (
	"reflect"
	"testing"
	"time"
)

func TestReconnectTargets(t *testing.T) {
	now := time.Now()
	m := &Membership{cfg: Config{Name: "self"}, members: map[string]*Member{
		"self":      {Name: "self", Addr: "10.0.0.1", Port: 7946, State: Dead, Since: now},
		"alive":     {Name: "alive", Addr: "10.0.0.2", Port: 7946, State: Alive, Since: now},
		"suspect":   {Name: "suspect", Addr: "10.0.0.3", Port: 7946, State: Suspect, Since: now},
		"dead":      {Name: "dead", Addr: "10.0.0.4", Port: 7947, State: Dead, Since: now.Add(-time.Minute)},
		"left":      {Name: "left", Addr: "10.0.0.5", Port: 7946, State: Left, Since: now.Add(-time.Hour)},
		"forgotten": {Name: "forgotten", Addr: "10.0.0.6", Port: 7946, State: Dead, Since: now.Add(-25 * time.Hour)},
	}}
	got := m.reconnectTargets(now, 24*time.Hour)
	want := []string{"10.0.0.4:7947", "10.0.0.5:7946"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("reconnectTargets = %v, want %v (dead or left within the forget period, never self)", got, want)
	}
}
