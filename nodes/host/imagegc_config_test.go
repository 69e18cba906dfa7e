package host

import (
	"strings"
	"testing"
	"time"
)

func TestConfigCompleteImageGC(t *testing.T) {
	for _, tc := range []struct {
		name      string
		low, high int
		age       time.Duration
		want      string // "" when valid
	}{
		{"defaults", 80, 85, 2 * time.Minute, ""},
		{"off", 0, 100, 0, ""},
		{"low equals high", 85, 85, time.Minute, "--image-gc-low-threshold 85 and --image-gc-high-threshold 85: give 0 <= low < high <= 100"},
		{"low above high", 90, 85, time.Minute, "--image-gc-low-threshold 90 and --image-gc-high-threshold 85"},
		{"negative low", -1, 85, time.Minute, "--image-gc-low-threshold -1"},
		{"high above 100", 80, 101, time.Minute, "--image-gc-high-threshold 101"},
		{"negative age", 80, 85, -time.Second, "--image-minimum-gc-age -1s is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.DataDir, c.Name = t.TempDir(), "host-1"
			c.ImageGCLowThresholdPercent, c.ImageGCHighThresholdPercent, c.ImageMinimumGCAge = tc.low, tc.high, tc.age
			_, err := c.Complete()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Complete() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Complete() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if c := DefaultConfig(); c.ImageGCHighThresholdPercent != 85 || c.ImageGCLowThresholdPercent != 80 || c.ImageMinimumGCAge != 2*time.Minute {
		t.Errorf("defaults %d/%d/%s, want the kubelet's 85/80/2m", c.ImageGCHighThresholdPercent, c.ImageGCLowThresholdPercent, c.ImageMinimumGCAge)
	}
}
