package agent

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// containerObs is what the agent knows of one container of a pod.
type containerObs struct {
	// current is the latest attempt, previous the one before (for lastState); nil when none.
	current, previous *rt.ContainerStatus
	attempt           int
	// waitingReason/Message explain why the container is not running (ErrImagePull,
	// CrashLoopBackOff, CreateContainerConfigError...); empty when nothing is in the way.
	waitingReason, waitingMessage string
	ready, started                bool
	// currentMessage and previousMessage are the termination messages of current and
	// previous once they exited.
	currentMessage, previousMessage string
}

// podObs is what the agent knows of a pod when it computes the pod's status.
type podObs struct {
	sandboxReady bool
	podIPs       []string
	hostIPs      []string
	containers   map[string]*containerObs // init and app containers by name
	startTime    time.Time
	// failed ends the pod (an init container failed with restartPolicy Never).
	failedReason, failedMessage string
}

// restarts reports whether a container that exited with code is started again.
func restarts(policy corev1.RestartPolicy, code int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return true
}

func containerState(s *rt.ContainerStatus, message string) corev1.ContainerState {
	switch s.State {
	case rt.StateRunning:
		return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(s.StartedAt)}}
	case rt.StateExited:
		reason, msg := "Error", ""
		switch {
		case s.StartError != "":
			reason, msg = "StartError", s.StartError
		case s.OOMKilled:
			reason = "OOMKilled"
		case s.ExitCode == 0:
			reason = "Completed"
		}
		if msg == "" {
			msg = message
		}
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: s.ExitCode, Reason: reason, Message: msg, StartedAt: metav1.NewTime(s.StartedAt),
			FinishedAt: metav1.NewTime(s.FinishedAt), ContainerID: "containerd://" + s.ID,
		}}
	}
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
}

func containerStatus(c *corev1.Container, o *containerObs, defaultWaiting string) corev1.ContainerStatus {
	st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, RestartCount: int32(o.attempt)}
	if o.current == nil {
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: defaultWaiting}
		if o.waitingReason != "" {
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: o.waitingReason, Message: o.waitingMessage}
		}
		st.Started = ptrBool(false)
		return st
	}
	st.ContainerID = "containerd://" + o.current.ID
	st.ImageID = o.current.ImageID
	st.State = containerState(o.current, o.currentMessage)
	if o.previous != nil && o.previous.State == rt.StateExited {
		st.LastTerminationState = containerState(o.previous, o.previousMessage)
	}
	if o.current.State == rt.StateExited && o.waitingReason != "" {
		// Exited and waiting to be started again (CrashLoopBackOff).
		st.LastTerminationState = st.State
		st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: o.waitingReason, Message: o.waitingMessage}}
	}
	running := o.current.State == rt.StateRunning
	st.Ready = running && o.ready
	st.Started = ptrBool(running && o.started)
	return st
}

func ptrBool(b bool) *bool { return &b }

// computeStatus derives the pod's status from what the agent observed, as the kubelet reports it.
func computeStatus(pod *corev1.Pod, o podObs, now time.Time) corev1.PodStatus {
	st := corev1.PodStatus{
		QOSClass:          pod.Status.QOSClass,
		NominatedNodeName: pod.Status.NominatedNodeName,
	}
	if !o.startTime.IsZero() {
		t := metav1.NewTime(o.startTime)
		st.StartTime = &t
	}
	if len(o.hostIPs) > 0 {
		st.HostIP = o.hostIPs[0]
		for _, ip := range o.hostIPs {
			st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: ip})
		}
	}
	if len(o.podIPs) > 0 {
		st.PodIP = o.podIPs[0]
		for _, ip := range o.podIPs {
			st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	obs := func(name string) *containerObs {
		if c, ok := o.containers[name]; ok {
			return c
		}
		return &containerObs{}
	}

	initDone := true
	var initPending []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		co := obs(c.Name)
		cs := containerStatus(c, co, "PodInitializing")
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		done := co.current != nil && co.current.State == rt.StateExited && co.current.ExitCode == 0
		if sidecar {
			done = co.current != nil && co.current.State == rt.StateRunning
		}
		if !done {
			initDone = false
			initPending = append(initPending, c.Name)
		}
	}
	var notReady []string
	running, terminal, succeeded, total := 0, 0, 0, len(pod.Spec.Containers)
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		co := obs(c.Name)
		def := "ContainerCreating"
		if !initDone {
			def = "PodInitializing"
		}
		cs := containerStatus(c, co, def)
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		if !cs.Ready {
			notReady = append(notReady, c.Name)
		}
		if co.current == nil {
			continue
		}
		switch co.current.State {
		case rt.StateRunning:
			running++
		case rt.StateExited:
			if !restarts(pod.Spec.RestartPolicy, co.current.ExitCode) {
				terminal++
				if co.current.ExitCode == 0 {
					succeeded++
				}
			} else {
				// Restarting counts as running for the phase, as upstream.
				running++
			}
		}
	}

	switch {
	case o.failedReason != "":
		st.Phase = corev1.PodFailed
		st.Reason, st.Message = o.failedReason, o.failedMessage
	case !initDone:
		st.Phase = corev1.PodPending
	case total > 0 && terminal == total && succeeded == total:
		st.Phase = corev1.PodSucceeded
	case total > 0 && terminal == total:
		st.Phase = corev1.PodFailed
	case running > 0 || terminal > 0:
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	finished := st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed

	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s, reason, msg = corev1.ConditionTrue, "", ""
		}
		return corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg}
	}
	containersReady := len(notReady) == 0 && !finished
	readyMsg := ""
	reason := "ContainersNotReady"
	if len(notReady) > 0 {
		readyMsg = fmt.Sprintf("containers with unready status: [%s]", strings.Join(notReady, " "))
	}
	if finished {
		reason = "PodCompleted"
		readyMsg = ""
	}
	ready := containersReady
	var gatesMissing []string
	for _, g := range pod.Spec.ReadinessGates {
		ok := false
		for _, c := range pod.Status.Conditions {
			if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
				ok = true
			}
		}
		if !ok {
			gatesMissing = append(gatesMissing, string(g.ConditionType))
		}
	}
	readyReason, readyMsg2 := reason, readyMsg
	if containersReady && len(gatesMissing) > 0 {
		ready = false
		readyReason = "ReadinessGatesNotReady"
		readyMsg2 = fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", gatesMissing[0])
	}
	initReason, initMsg := "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(initPending, " "))
	if finished && !initDone {
		initReason, initMsg = "PodCompleted", ""
	}
	conds := []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, o.sandboxReady && !finished, "", ""),
		cond(corev1.PodInitialized, initDone, initReason, initMsg),
		cond(corev1.PodReady, ready, readyReason, readyMsg2),
		cond(corev1.ContainersReady, containersReady, reason, readyMsg),
	}
	// Conditions the agent does not own (PodScheduled, readiness gates, DisruptionTarget) stay.
	owned := map[corev1.PodConditionType]bool{}
	for _, c := range conds {
		owned[c.Type] = true
	}
	for _, c := range pod.Status.Conditions {
		if !owned[c.Type] {
			conds = append(conds, c)
		}
	}
	nowT := metav1.NewTime(now)
	for i := range conds {
		conds[i].LastTransitionTime = nowT
		for _, old := range pod.Status.Conditions {
			if old.Type == conds[i].Type && old.Status == conds[i].Status {
				conds[i].LastTransitionTime = old.LastTransitionTime
				if owned[conds[i].Type] {
					conds[i].LastProbeTime = old.LastProbeTime
				}
			}
		}
	}
	order := map[corev1.PodConditionType]int{corev1.PodReadyToStartContainers: 0, corev1.PodInitialized: 1, corev1.PodReady: 2, corev1.ContainersReady: 3, corev1.PodScheduled: 4}
	sort.SliceStable(conds, func(i, j int) bool {
		oi, ok := order[conds[i].Type]
		if !ok {
			oi = 10
		}
		oj, ok := order[conds[j].Type]
		if !ok {
			oj = 10
		}
		return oi < oj
	})
	st.Conditions = conds
	return st
}
