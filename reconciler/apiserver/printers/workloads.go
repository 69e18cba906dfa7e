package printers

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
)

var (
	containersColumn = wide("Containers", "string", "Names of each container in the template.")
	imagesColumn     = wide("Images", "string", "Images referenced by each container in the template.")
	selectorColumn   = wide("Selector", "string", "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.")
)

// selectorText renders a label selector as kubectl does in the SELECTOR column.
func selectorText(s *metav1.LabelSelector) string {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return "<error>"
	}
	return sel.String()
}

func replicas(r *int32) int32 {
	if r == nil {
		return 1 // the default, for objects read before defaulting
	}
	return *r
}

var deploymentPrinter = named([]metav1.TableColumnDefinition{
	col("Ready", "string", "Number of the pod with ready state"),
	col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
	col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
	ageColumn,
	containersColumn, imagesColumn, selectorColumn,
}, func(d *appsv1.Deployment, c clock) []any {
	names, images := containerCells(d.Spec.Template.Spec.Containers)
	return []any{
		fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, replicas(d.Spec.Replicas)),
		int64(d.Status.UpdatedReplicas), int64(d.Status.AvailableReplicas), c.age(d.CreationTimestamp),
		names, images, selectorText(d.Spec.Selector),
	}
})

var replicaSetPrinter = named([]metav1.TableColumnDefinition{
	col("Desired", "integer", "Replicas is the number of desired pods."),
	col("Current", "integer", "Replicas is the most recently observed number of replicas."),
	col("Ready", "integer", "The number of ready replicas for this replica set."),
	ageColumn,
	containersColumn, imagesColumn, selectorColumn,
}, func(rs *appsv1.ReplicaSet, c clock) []any {
	names, images := containerCells(rs.Spec.Template.Spec.Containers)
	return []any{
		int64(replicas(rs.Spec.Replicas)), int64(rs.Status.Replicas), int64(rs.Status.ReadyReplicas), c.age(rs.CreationTimestamp),
		names, images, selectorText(rs.Spec.Selector),
	}
})

var statefulSetPrinter = named([]metav1.TableColumnDefinition{
	col("Ready", "string", "Number of the pod with ready state"),
	ageColumn,
	containersColumn, imagesColumn,
}, func(s *appsv1.StatefulSet, c clock) []any {
	names, images := containerCells(s.Spec.Template.Spec.Containers)
	return []any{fmt.Sprintf("%d/%d", s.Status.ReadyReplicas, replicas(s.Spec.Replicas)), c.age(s.CreationTimestamp), names, images}
})

var daemonSetPrinter = named([]metav1.TableColumnDefinition{
	col("Desired", "integer", "The total number of nodes that should be running the daemon pod."),
	col("Current", "integer", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod."),
	col("Ready", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition."),
	col("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
	col("Available", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available."),
	col("Node Selector", "string", "NodeSelector is a selector which must be true for the pod to fit on a node."),
	ageColumn,
	containersColumn, imagesColumn, selectorColumn,
}, func(ds *appsv1.DaemonSet, c clock) []any {
	names, images := containerCells(ds.Spec.Template.Spec.Containers)
	st := ds.Status
	return []any{
		int64(st.DesiredNumberScheduled), int64(st.CurrentNumberScheduled), int64(st.NumberReady),
		int64(st.UpdatedNumberScheduled), int64(st.NumberAvailable), labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector),
		c.age(ds.CreationTimestamp), names, images, selectorText(ds.Spec.Selector),
	}
})

var controllerRevisionPrinter = named([]metav1.TableColumnDefinition{
	col("Controller", "string", "Controller of the object"),
	col("Revision", "string", "Revision indicates the revision of the state represented by Data."),
	ageColumn,
}, func(cr *appsv1.ControllerRevision, c clock) []any {
	controller := none
	if ref := metav1.GetControllerOf(cr); ref != nil {
		controller = ref.Name
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil && ref.Kind != "" {
			// "daemonset.apps/node-exporter", as kubectl names resources.
			controller = strings.ToLower(gv.WithKind(ref.Kind).GroupKind().String()) + "/" + ref.Name
		}
	}
	return []any{controller, cr.Revision, c.age(cr.CreationTimestamp)}
})

var jobPrinter = named([]metav1.TableColumnDefinition{
	col("Status", "string", "Status of the job."),
	col("Completions", "string", "The completion status of the job as <succeeded>/<desired>."),
	col("Duration", "string", "Time required to complete the job."),
	ageColumn,
	containersColumn, imagesColumn, selectorColumn,
}, func(j *batchv1.Job, c clock) []any {
	var completions string
	switch {
	case j.Spec.Completions != nil:
		completions = fmt.Sprintf("%d/%d", j.Status.Succeeded, *j.Spec.Completions)
	case j.Spec.Parallelism != nil && *j.Spec.Parallelism > 1:
		completions = fmt.Sprintf("%d/1 of %d", j.Status.Succeeded, *j.Spec.Parallelism)
	default:
		completions = fmt.Sprintf("%d/1", j.Status.Succeeded)
	}
	var took string
	switch {
	case j.Status.StartTime == nil:
	case j.Status.CompletionTime == nil:
		took = c.age(*j.Status.StartTime)
	default:
		took = duration.HumanDuration(j.Status.CompletionTime.Sub(j.Status.StartTime.Time))
	}
	names, images := containerCells(j.Spec.Template.Spec.Containers)
	return []any{jobStatus(j), completions, took, c.age(j.CreationTimestamp), names, images, selectorText(j.Spec.Selector)}
})

func jobStatus(j *batchv1.Job) string {
	has := func(t batchv1.JobConditionType) bool {
		for _, cond := range j.Status.Conditions {
			if cond.Type == t && cond.Status == "True" {
				return true
			}
		}
		return false
	}
	switch {
	case has(batchv1.JobComplete):
		return "Complete"
	case has(batchv1.JobFailed):
		return "Failed"
	case j.DeletionTimestamp != nil:
		return "Terminating"
	case has(batchv1.JobSuspended):
		return "Suspended"
	case has(batchv1.JobFailureTarget):
		return "FailureTarget"
	case has(batchv1.JobSuccessCriteriaMet):
		return "SuccessCriteriaMet"
	}
	return "Running"
}

var cronJobPrinter = named([]metav1.TableColumnDefinition{
	col("Schedule", "string", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
	col("Timezone", "string", "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones."),
	col("Suspend", "boolean", "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions."),
	col("Active", "integer", "A list of pointers to currently running jobs."),
	col("Last Schedule", "string", "Information when was the last time the job was successfully scheduled."),
	ageColumn,
	containersColumn, imagesColumn, selectorColumn,
}, func(cj *batchv1.CronJob, c clock) []any {
	last := none
	if cj.Status.LastScheduleTime != nil {
		last = c.age(*cj.Status.LastScheduleTime)
	}
	tz := none
	if cj.Spec.TimeZone != nil {
		tz = *cj.Spec.TimeZone
	}
	suspend := "<unset>"
	if cj.Spec.Suspend != nil {
		suspend = "False"
		if *cj.Spec.Suspend {
			suspend = "True"
		}
	}
	names, images := containerCells(cj.Spec.JobTemplate.Spec.Template.Spec.Containers)
	return []any{
		cj.Spec.Schedule, tz, suspend, int64(len(cj.Status.Active)), last, c.age(cj.CreationTimestamp),
		names, images, selectorText(cj.Spec.JobTemplate.Spec.Selector),
	}
})
