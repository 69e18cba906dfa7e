package host

import (
	"strings"
	"testing"
)

func TestConfigCompleteSnapshots(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"schedule not cron", func(c *Config) { c.SnapshotSchedule = "every day" }, `--snapshot-schedule "every day" is not a cron expression`},
		{"six fields", func(c *Config) { c.SnapshotSchedule = "0 0 */6 * * *" }, "--snapshot-schedule"},
		{"no retention", func(c *Config) { c.SnapshotRetention = 0 }, "--snapshot-retention 0: keep at least 1"},
		{"on a worker", func(c *Config) {
			c.SnapshotSchedule, c.Etcd, c.Join, c.TokenFile = "@daily", false, []string{"10.0.0.1:7946"}, "t"
		}, "--snapshot-schedule is set on a worker"},
		{"fine", func(c *Config) { c.SnapshotSchedule, c.SnapshotRetention = "0 */6 * * *", 3 }, ""},
		{"off by default", func(c *Config) {}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.DataDir, c.Name = t.TempDir(), "h1"
			tc.change(&c)
			_, err := c.Complete()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}
