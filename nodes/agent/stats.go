package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/nodes/agent/stats"
	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// The resource usage the API server serves as metrics.k8s.io: the agent reads the CPU
// counters of the host and of every running container every statsInterval and keeps them for
// statsMaxAge, so that a summary has CPU rates over the last 10 to 15 s at once.
const (
	statsInterval  = 5 * time.Second
	statsMinWindow = 10 * time.Second
	statsMaxAge    = 30 * time.Second
)

// cgroupPather is a runtime that knows its containers' cgroups (nodes/runtime does).
type cgroupPather interface {
	CgroupPath(id string) string
}

// statsCollector reads the usage of the host and of the running containers of its pods.
type statsCollector struct {
	node     string
	cgroups  stats.Cgroups
	procRoot string
	history  *stats.History
	// running lists the running containers (with the pod labels of containers.go).
	running func(ctx context.Context) ([]rt.ContainerStatus, error)
	// cgroupOf returns a container's cgroup path, "" when unknown.
	cgroupOf func(id string) string
	now      func() time.Time
	log      *logrus.Entry
}

func newStatsCollector(m *PodManager) *statsCollector {
	cgroupOf := func(string) string { return "" }
	if p, ok := m.cfg.Runtime.(cgroupPather); ok {
		cgroupOf = p.CgroupPath
	}
	return &statsCollector{
		node:     m.cfg.NodeName,
		cgroups:  stats.Cgroups{Root: "/sys/fs/cgroup"},
		procRoot: "/proc",
		history:  &stats.History{MinWindow: statsMinWindow, MaxAge: statsMaxAge},
		running:  m.runningContainers,
		cgroupOf: cgroupOf,
		now:      time.Now,
		log:      m.log,
	}
}

// runningContainers returns the running containers of this host's pods.
func (m *PodManager) runningContainers(ctx context.Context) ([]rt.ContainerStatus, error) {
	snap, err := m.containers(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []rt.ContainerStatus
	for _, cs := range snap {
		for _, c := range cs {
			if c.State == rt.StateRunning {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// run samples the CPU counters every statsInterval until ctx ends.
func (s *statsCollector) run(ctx context.Context) {
	t := time.NewTicker(statsInterval)
	defer t.Stop()
	for {
		if err := s.sample(ctx); err != nil && ctx.Err() == nil {
			s.log.WithError(err).Debug("sample resource usage")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample records the CPU counters of the host and of every running container.
func (s *statsCollector) sample(ctx context.Context) error {
	now := s.now()
	cs, err := s.running(ctx)
	if err != nil {
		return err
	}
	r := stats.Reading{Time: now, Containers: map[string]uint64{}}
	r.Node, err = stats.NodeCPU(s.procRoot)
	r.NodeOK = err == nil
	for _, c := range cs {
		if path := s.cgroupOf(c.ID); path != "" {
			if cpu, err := s.cgroups.CPU(path); err == nil {
				r.Containers[c.ID] = cpu
			}
		}
	}
	s.history.Add(r)
	return nil
}

// summary reads the usage of the host and of every running container now. CPU rates are
// averages since the baseline reading (10 to 15 s ago), or since the container started when
// that was later; right after the agent started there are none for a second.
func (s *statsCollector) summary(ctx context.Context) (*stats.Summary, error) {
	now := s.now()
	cs, err := s.running(ctx)
	if err != nil {
		return nil, err
	}
	base, haveBase := s.history.Baseline(now)
	out := &stats.Summary{Node: stats.NodeStats{NodeName: s.node}, Pods: []stats.PodStats{}}
	if cpu, err := stats.NodeCPU(s.procRoot); err == nil {
		st := &stats.CPUStats{Time: now, UsageCoreNanoSeconds: cpu}
		if haveBase && base.NodeOK {
			st.SetRate(base.Node, base.Time)
		}
		out.Node.CPU = st
	}
	if usage, ws, err := stats.NodeMemory(s.procRoot); err == nil {
		out.Node.Memory = &stats.MemoryStats{Time: now, UsageBytes: usage, WorkingSetBytes: ws}
	}

	pods := map[string]*stats.PodStats{}
	for _, c := range cs {
		uid, path := c.Labels[labelPodUID], s.cgroupOf(c.ID)
		if uid == "" || path == "" {
			continue
		}
		cst := stats.ContainerStats{Name: c.Labels[labelContainer], StartTime: c.StartedAt}
		if cpu, err := s.cgroups.CPU(path); err == nil {
			st := &stats.CPUStats{Time: now, UsageCoreNanoSeconds: cpu}
			if prev, ok := base.Containers[c.ID]; haveBase && ok {
				st.SetRate(prev, base.Time)
			} else if haveBase && c.StartedAt.After(base.Time) {
				// Started since the baseline: its counter was zero when it started.
				st.SetRate(0, c.StartedAt)
			}
			cst.CPU = st
		}
		if usage, ws, err := s.cgroups.Memory(path); err == nil {
			cst.Memory = &stats.MemoryStats{Time: now, UsageBytes: usage, WorkingSetBytes: ws}
		}
		p := pods[uid]
		if p == nil {
			p = &stats.PodStats{PodRef: stats.PodReference{UID: uid, Namespace: c.Labels[labelPodNamespace], Name: c.Labels[labelPodName]}}
			pods[uid] = p
		}
		p.Containers = append(p.Containers, cst)
	}
	for _, p := range pods {
		sort.Slice(p.Containers, func(i, j int) bool { return p.Containers[i].Name < p.Containers[j].Name })
		p.Sum()
		out.Pods = append(out.Pods, *p)
	}
	sort.Slice(out.Pods, func(i, j int) bool {
		a, b := out.Pods[i].PodRef, out.Pods[j].PodRef
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out, nil
}

// serveStats answers GET /stats/summary.
func (m *PodManager) serveStats(w http.ResponseWriter, r *http.Request) {
	sum, err := m.stats.summary(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(sum)
}
