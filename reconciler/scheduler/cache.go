package scheduler

import (
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// cachedPod is a pod counted on a node: bound (seen with spec.nodeName by the informer) or
// assumed (a binding of ours in flight or just done and not yet seen).
type cachedPod struct {
	info    *PodInfo
	node    string
	assumed bool
	// expires is when an assumed pod whose binding finished stops counting if the informer
	// never confirmed it (zero while the binding is in flight).
	expires time.Time
}

// Cache holds the nodes and the pods counted on them. Informer handlers update it; a
// scheduling cycle reads it under RLock through Snapshot.
type Cache struct {
	mu    sync.RWMutex
	nodes map[string]*NodeInfo // includes placeholders for pods bound to unknown nodes
	pods  map[string]*cachedPod
	snap  *Snapshot
	dirty bool // the node list must be rebuilt
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{nodes: map[string]*NodeInfo{}, pods: map[string]*cachedPod{},
		snap: &Snapshot{byName: map[string]*NodeInfo{}, ImageNodes: map[string]int{}}}
}

func (c *Cache) nodeInfo(name string) *NodeInfo {
	ni, ok := c.nodes[name]
	if !ok {
		ni = NewNodeInfo(nil)
		c.nodes[name] = ni
	}
	return ni
}

func (c *Cache) countImages(ni *NodeInfo, d int) {
	for img := range ni.Images {
		c.snap.ImageNodes[img] += d
		if c.snap.ImageNodes[img] <= 0 {
			delete(c.snap.ImageNodes, img)
		}
	}
}

// SetNode adds or updates a node.
func (c *Cache) SetNode(node *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ni := c.nodeInfo(node.Name)
	if ni.Node == nil {
		c.dirty = true
	} else {
		c.countImages(ni, -1)
	}
	ni.SetNode(node)
	c.countImages(ni, 1)
}

// RemoveNode forgets a node; pods still bound to it keep a placeholder until they go.
func (c *Cache) RemoveNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ni, ok := c.nodes[name]
	if !ok || ni.Node == nil {
		return
	}
	c.countImages(ni, -1)
	ni.Node, ni.Images = nil, nil
	if len(ni.Pods) == 0 {
		delete(c.nodes, name)
	}
	c.dirty = true
}

func (c *Cache) addLocked(p *cachedPod) {
	c.pods[string(p.info.Pod.UID)] = p
	ni := c.nodeInfo(p.node)
	ni.AddPod(p.info)
	if len(p.info.requiredAffinity)+len(p.info.requiredAnti)+len(p.info.preferredAffinity)+len(p.info.preferredAnti) > 0 {
		c.snap.PodsWithAffinity++
	}
}

func (c *Cache) removeLocked(uid string) {
	p, ok := c.pods[uid]
	if !ok {
		return
	}
	delete(c.pods, uid)
	if ni, ok := c.nodes[p.node]; ok {
		ni.RemovePod(uid)
		if ni.Node == nil && len(ni.Pods) == 0 {
			delete(c.nodes, p.node)
		}
	}
	if len(p.info.requiredAffinity)+len(p.info.requiredAnti)+len(p.info.preferredAffinity)+len(p.info.preferredAnti) > 0 {
		c.snap.PodsWithAffinity--
	}
}

// SetPod records a pod the informer shows bound to a node; it confirms (or corrects) an
// assumption for the same pod.
func (c *Cache) SetPod(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	uid := string(pod.UID)
	c.removeLocked(uid)
	c.addLocked(&cachedPod{info: NewPodInfo(pod), node: pod.Spec.NodeName})
}

// RemovePod stops counting a pod (deleted, finished, or no longer bound).
func (c *Cache) RemovePod(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(uid)
}

// Assume counts pi on node before its binding is committed, so the next decisions see it.
// It reports false when the pod is already counted (bound meanwhile).
func (c *Cache) Assume(pi *PodInfo, node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pods[string(pi.Pod.UID)]; ok {
		return false
	}
	c.addLocked(&cachedPod{info: pi, node: node, assumed: true})
	return true
}

// FinishBinding starts the expiry of an assumption whose binding succeeded: if the informer
// has not confirmed it within ttl, it is dropped (the pod was deleted meanwhile).
func (c *Cache) FinishBinding(uid string, now time.Time, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pods[uid]; ok && p.assumed {
		p.expires = now.Add(ttl)
	}
}

// Forget drops an assumption whose binding failed; a confirmed pod stays.
func (c *Cache) Forget(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pods[uid]; ok && p.assumed {
		c.removeLocked(uid)
	}
}

// Expire drops assumptions whose binding finished and were never confirmed by now.
func (c *Cache) Expire(now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for uid, p := range c.pods {
		if p.assumed && !p.expires.IsZero() && now.After(p.expires) {
			c.removeLocked(uid)
			n++
		}
	}
	return n
}

// IsAssumed reports whether the pod is counted only by assumption.
func (c *Cache) IsAssumed(uid string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p, ok := c.pods[uid]
	return ok && p.assumed
}

// RLock locks the cache for reading and returns the snapshot to schedule on; call RUnlock
// when the decision is made.
func (c *Cache) RLock() *Snapshot {
	c.mu.RLock()
	if c.dirty {
		c.mu.RUnlock()
		c.mu.Lock()
		c.rebuildLocked()
		c.mu.Unlock()
		c.mu.RLock()
	}
	return c.snap
}

// RUnlock releases RLock.
func (c *Cache) RUnlock() { c.mu.RUnlock() }

// rebuildLocked lists the known nodes by name: a fixed order that decisions rotate over.
func (c *Cache) rebuildLocked() {
	if !c.dirty {
		return
	}
	list := make([]*NodeInfo, 0, len(c.nodes))
	byName := make(map[string]*NodeInfo, len(c.nodes))
	for name, ni := range c.nodes {
		if ni.Node != nil {
			list = append(list, ni)
			byName[name] = ni
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Node.Name < list[j].Node.Name })
	c.snap.Nodes, c.snap.byName = list, byName
	c.dirty = false
}
