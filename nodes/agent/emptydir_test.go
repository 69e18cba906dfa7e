package agent

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const mib = 1 << 20

// writeData writes n bytes that no file system can compress or leave as holes.
func writeData(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, uint64(n)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func usage(t *testing.T, dir string) int64 {
	t.Helper()
	n, err := dirUsage(dir)
	if err != nil {
		t.Fatalf("dirUsage(%s): %v", dir, err)
	}
	return n
}

func TestDirUsage(t *testing.T) {
	// Slack for the blocks of directories and file system metadata.
	const slack = 256 << 10
	root := t.TempDir()
	vol := filepath.Join(root, "vol")
	if got := usage(t, vol); got != 0 {
		t.Fatalf("a missing directory uses %d bytes, want 0", got)
	}
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := usage(t, vol); got > slack {
		t.Fatalf("an empty directory uses %d bytes", got)
	}

	writeData(t, filepath.Join(vol, "a", "b", "data"), 3*mib)
	base := usage(t, vol)
	if base < 3*mib || base > 3*mib+slack {
		t.Fatalf("3 MiB of data in a subdirectory: usage %d, want 3 MiB plus little", base)
	}

	t.Run("blocks, not lengths: a sparse file counts what it holds", func(t *testing.T) {
		f, err := os.Create(filepath.Join(vol, "sparse"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(100 * mib); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if got := usage(t, vol); got > base+slack {
			t.Fatalf("a 100 MiB hole raised the usage from %d to %d", base, got)
		}
	})

	t.Run("a hard-linked file counts once", func(t *testing.T) {
		if err := os.Link(filepath.Join(vol, "a", "b", "data"), filepath.Join(vol, "link")); err != nil {
			t.Fatal(err)
		}
		if got := usage(t, vol); got > base+slack {
			t.Fatalf("a second name of the 3 MiB file raised the usage from %d to %d", base, got)
		}
	})

	t.Run("symbolic links are not followed", func(t *testing.T) {
		outside := filepath.Join(root, "outside")
		writeData(t, filepath.Join(outside, "big"), 5*mib)
		for name, target := range map[string]string{"to-file": filepath.Join(outside, "big"), "to-dir": outside, "to-root": "/"} {
			if err := os.Symlink(target, filepath.Join(vol, name)); err != nil {
				t.Fatal(err)
			}
		}
		if got := usage(t, vol); got > base+slack {
			t.Fatalf("links to 5 MiB outside the volume raised the usage from %d to %d", base, got)
		}
	})

	t.Run("more data counts", func(t *testing.T) {
		writeData(t, filepath.Join(vol, "more"), 2*mib)
		if got := usage(t, vol); got < base+2*mib || got > base+2*mib+slack {
			t.Fatalf("2 MiB more: usage %d, want about %d", got, base+2*mib)
		}
	})

	t.Run("agrees with du", func(t *testing.T) {
		out, err := exec.Command("du", "-s", "-B1", vol).Output()
		if err != nil {
			t.Skipf("no GNU du here: %v", err)
		}
		want, err := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
		if err != nil {
			t.Fatalf("du said %q", out)
		}
		if got := usage(t, vol); got != want {
			t.Fatalf("usage %d, du says %d", got, want)
		}
	})
}

func emptyDirPod() *corev1.Pod {
	limit := func(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cache-0", Namespace: "shop", UID: "5678"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}, Volumes: []corev1.Volume{
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "ram", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: limit("1Ki")}}},
			{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: limit("2Mi")}}},
			{Name: "zero", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: limit("0")}}},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func TestEmptyDirOverLimit(t *testing.T) {
	pod := emptyDirPod()
	podDir := t.TempDir()
	vol := func(name string) string { return filepath.Join(podDir, "volumes", name) }
	check := func(want string) {
		t.Helper()
		got, err := emptyDirOverLimit(pod, podDir)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("eviction message %q, want %q", got, want)
		}
	}
	check("") // volumes not set up yet
	writeData(t, filepath.Join(vol("cache"), "part"), mib)
	check("")
	// Over their "limits" but not judged: no limit, a zero limit, memory-backed (its tmpfs
	// bounds it), not an emptyDir.
	for _, name := range []string{"scratch", "zero", "ram", "cfg"} {
		writeData(t, filepath.Join(vol(name), "big"), 3*mib)
	}
	check("")
	writeData(t, filepath.Join(vol("cache"), "sub", "more"), mib+mib/2)
	check(`Usage of EmptyDir volume "cache" exceeds the limit "2Mi". `)
	if err := os.RemoveAll(filepath.Join(vol("cache"), "sub")); err != nil {
		t.Fatal(err)
	}
	check("")
}

func TestEvictable(t *testing.T) {
	for name, c := range map[string]struct {
		change func(p *corev1.Pod)
		want   bool
	}{
		"running with a disk emptyDir limit": {func(p *corev1.Pod) {}, true},
		"pending":                            {func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, true},
		"failed":                             {func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, false},
		"succeeded":                          {func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, false},
		"being deleted":                      {func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, false},
		"system-critical priority":           {func(p *corev1.Pod) { p.Spec.Priority = ptr.To(int32(2000001000)) }, false},
		"high but not critical priority":     {func(p *corev1.Pod) { p.Spec.Priority = ptr.To(int32(1000000000)) }, true},
		"mirror pod": {func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
		}, false},
		"no disk emptyDir with a limit": {func(p *corev1.Pod) {
			// cfg, scratch, ram and zero: all but cache.
			p.Spec.Volumes = append(p.Spec.Volumes[:3:3], p.Spec.Volumes[4])
		}, false},
	} {
		t.Run(name, func(t *testing.T) {
			p := emptyDirPod()
			c.change(p)
			if got := evictable(p); got != c.want {
				t.Fatalf("evictable = %v, want %v", got, c.want)
			}
		})
	}
}

func TestMemoryEmptyDirSize(t *testing.T) {
	q := func(s string) int64 { v := resource.MustParse(s); return v.Value() }
	mem := func(s string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(s)}}
	}
	ctr := func(name, limit string) corev1.Container {
		c := corev1.Container{Name: name, Image: "x"}
		if limit != "" {
			c.Resources = mem(limit)
		}
		return c
	}
	sidecar := func(name, limit string) corev1.Container {
		c := ctr(name, limit)
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		return c
	}
	host := q("8Gi")
	for name, c := range map[string]struct {
		sizeLimit  string
		containers []corev1.Container
		inits      []corev1.Container
		podLevel   string
		want       int64
	}{
		"no limits: the host's memory":                  {want: host, containers: []corev1.Container{ctr("a", "")}},
		"sizeLimit alone":                               {sizeLimit: "64Mi", containers: []corev1.Container{ctr("a", "")}, want: q("64Mi")},
		"all containers limited: their sum":             {containers: []corev1.Container{ctr("a", "100Mi"), ctr("b", "28Mi")}, want: q("128Mi")},
		"one container unlimited: no pod limit":         {containers: []corev1.Container{ctr("a", "100Mi"), ctr("b", "")}, want: host},
		"sizeLimit below the pod limit":                 {sizeLimit: "10Mi", containers: []corev1.Container{ctr("a", "100Mi")}, want: q("10Mi")},
		"sizeLimit above the pod limit: the pod limit":  {sizeLimit: "1Gi", containers: []corev1.Container{ctr("a", "100Mi")}, want: q("100Mi")},
		"sizeLimit above the host's memory":             {sizeLimit: "1Ti", containers: []corev1.Container{ctr("a", "")}, want: host},
		"an init container larger than the apps":        {containers: []corev1.Container{ctr("a", "100Mi")}, inits: []corev1.Container{ctr("i", "300Mi")}, want: q("300Mi")},
		"a sidecar adds to the apps":                    {containers: []corev1.Container{ctr("a", "100Mi")}, inits: []corev1.Container{sidecar("s", "50Mi"), ctr("i", "120Mi")}, want: q("170Mi")},
		"an unlimited init container: no pod limit":     {containers: []corev1.Container{ctr("a", "100Mi")}, inits: []corev1.Container{ctr("i", "")}, want: host},
		"a pod-level limit wins over the containers'":   {containers: []corev1.Container{ctr("a", "")}, podLevel: "200Mi", want: q("200Mi")},
		"sizeLimit below a pod-level limit":             {sizeLimit: "20Mi", containers: []corev1.Container{ctr("a", "")}, podLevel: "200Mi", want: q("20Mi")},
		"a zero sizeLimit is no limit":                  {sizeLimit: "0", containers: []corev1.Container{ctr("a", "64Mi")}, want: q("64Mi")},
		"pod limit above the host's memory: the host's": {containers: []corev1.Container{ctr("a", "16Gi")}, want: host},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: c.containers, InitContainers: c.inits}}
			if c.podLevel != "" {
				r := mem(c.podLevel)
				pod.Spec.Resources = &r
			}
			e := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
			if c.sizeLimit != "" {
				l := resource.MustParse(c.sizeLimit)
				e.SizeLimit = &l
			}
			if got := memoryEmptyDirSize(pod, e, host); got != c.want {
				t.Fatalf("tmpfs size %d, want %d", got, c.want)
			}
		})
	}
	t.Run("unknown host memory and no limits: the kernel's default", func(t *testing.T) {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", "")}}}
		if got := memoryEmptyDirSize(pod, &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}, 0); got != 0 {
			t.Fatalf("tmpfs size %d, want 0 (no size option)", got)
		}
	})
}
