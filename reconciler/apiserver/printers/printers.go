// Package printers turns stored objects into the metav1.Table that `kubectl get` prints, with the
// columns a real Kubernetes API server returns. Kubernetes' own printers live in
// k8s.io/kubernetes, which we do not import; these follow their shape (column names, -o wide
// columns at priority 1, cell texts such as "<none>", "80:30080/TCP", "CrashLoopBackOff").
//
// Like upstream, the server always fills every column; kubectl hides priority 1 columns unless
// asked for -o wide.
package printers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apiserver/pkg/registry/rest"
)

// TableConvertor returns the table convertor for a resource. Resources without columns of their
// own (gitsources.flotilla.dev until the gitsync work adds its URL/REVISION/READY/MESSAGE columns,
// and any other unknown resource) get NAME and AGE.
func TableConvertor(gr schema.GroupResource) rest.TableConvertor {
	return newConvertor(gr, time.Now)
}

func newConvertor(gr schema.GroupResource, now func() time.Time) *convertor {
	p, ok := printersByResource[gr]
	if !ok {
		p = defaultPrinter
	}
	return &convertor{printer: p, now: now}
}

// printer knows the columns of one resource and how to fill them from one object.
type printer struct {
	columns []metav1.TableColumnDefinition
	// row fills the cells (all columns, NAME included) and, for pods, the row conditions.
	row func(obj runtime.Object, c clock) (metav1.TableRow, error)
}

type convertor struct {
	printer printer
	now     func() time.Time
}

var _ rest.TableConvertor = &convertor{}

// ConvertToTable accepts one object or a list of them.
func (c *convertor) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	noHeaders := false
	switch o := tableOptions.(type) {
	case nil:
	case *metav1.TableOptions:
		if o != nil {
			noHeaders = o.NoHeaders
		}
	default:
		return nil, fmt.Errorf("unrecognized type %T for table options, can't display tabular output", tableOptions)
	}

	table := &metav1.Table{}
	if !noHeaders {
		table.ColumnDefinitions = c.printer.columns
	}
	clk := clock(c.now)

	items := []runtime.Object{obj}
	if meta.IsListType(obj) {
		var err error
		if items, err = meta.ExtractList(obj); err != nil {
			return nil, fmt.Errorf("extract list items of %T: %w", obj, err)
		}
		if l, err := meta.ListAccessor(obj); err == nil {
			table.ResourceVersion = l.GetResourceVersion()
			table.Continue = l.GetContinue()
			table.RemainingItemCount = l.GetRemainingItemCount()
		}
	} else if m, err := meta.CommonAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}

	table.Rows = make([]metav1.TableRow, 0, len(items))
	for _, item := range items {
		row, err := c.printer.row(item, clk)
		if err != nil {
			return nil, err
		}
		row.Object = runtime.RawExtension{Object: item}
		table.Rows = append(table.Rows, row)
	}
	return table, nil
}

// clock returns the current time; tests fix it so that AGE cells are stable.
type clock func() time.Time

// age is the AGE text of a timestamp: "<unknown>" when unset.
func (c clock) age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(c().Sub(t.Time))
}

func (c clock) ageMicro(t metav1.MicroTime) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(c().Sub(t.Time))
}

var nameColumn = metav1.TableColumnDefinition{
	Name: "Name", Type: "string", Format: "name",
	Description: "Name must be unique within a namespace. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
}

var ageColumn = metav1.TableColumnDefinition{
	Name: "Age", Type: "string",
	Description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
}

// col is a column shown by plain `kubectl get`.
func col(name, typ, description string) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: typ, Description: description}
}

// wide is a column shown only with -o wide.
func wide(name, typ, description string) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: typ, Priority: 1, Description: description}
}

// named builds a printer whose first column is NAME followed by columns; cells returns the cells
// after the name.
func named[T runtime.Object](columns []metav1.TableColumnDefinition, cells func(obj T, c clock) []any) printer {
	return printer{
		columns: append([]metav1.TableColumnDefinition{nameColumn}, columns...),
		row: func(obj runtime.Object, c clock) (metav1.TableRow, error) {
			t, ok := obj.(T)
			if !ok {
				return metav1.TableRow{}, fmt.Errorf("table printer: unexpected object %T", obj)
			}
			m, err := meta.Accessor(obj)
			if err != nil {
				return metav1.TableRow{}, fmt.Errorf("table printer: %w", err)
			}
			return metav1.TableRow{Cells: append([]any{m.GetName()}, cells(t, c)...)}, nil
		},
	}
}

// defaultPrinter is NAME and AGE from object metadata, for any kind.
var defaultPrinter = printer{
	columns: []metav1.TableColumnDefinition{nameColumn, ageColumn},
	row: func(obj runtime.Object, c clock) (metav1.TableRow, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return metav1.TableRow{}, fmt.Errorf("table printer: %w", err)
		}
		return metav1.TableRow{Cells: []any{m.GetName(), c.age(m.GetCreationTimestamp())}}, nil
	},
}

var printersByResource = map[schema.GroupResource]printer{
	{Resource: "pods"}:                              podPrinter,
	{Resource: "podtemplates"}:                      podTemplatePrinter,
	{Resource: "services"}:                          servicePrinter,
	{Resource: "endpoints"}:                         endpointsPrinter,
	{Resource: "namespaces"}:                        namespacePrinter,
	{Resource: "nodes"}:                             nodePrinter,
	{Resource: "configmaps"}:                        configMapPrinter,
	{Group: "flotilla.dev", Resource: "gitsources"}: gitSourcePrinter,
	{Resource: "secrets"}:                           secretPrinter,
	{Resource: "serviceaccounts"}:                   serviceAccountPrinter,
	{Resource: "events"}:                            eventPrinter,
	{Resource: "persistentvolumes"}:                 persistentVolumePrinter,
	{Resource: "persistentvolumeclaims"}:            persistentVolumeClaimPrinter,
	{Resource: "resourcequotas"}:                    resourceQuotaPrinter,
	{Resource: "limitranges"}:                       limitRangePrinter,

	{Group: "apps", Resource: "deployments"}:         deploymentPrinter,
	{Group: "apps", Resource: "replicasets"}:         replicaSetPrinter,
	{Group: "apps", Resource: "statefulsets"}:        statefulSetPrinter,
	{Group: "apps", Resource: "daemonsets"}:          daemonSetPrinter,
	{Group: "apps", Resource: "controllerrevisions"}: controllerRevisionPrinter,
	{Group: "batch", Resource: "jobs"}:               jobPrinter,
	{Group: "batch", Resource: "cronjobs"}:           cronJobPrinter,

	{Group: "discovery.k8s.io", Resource: "endpointslices"}:                                endpointSlicePrinter,
	{Group: "networking.k8s.io", Resource: "ingresses"}:                                    ingressPrinter,
	{Group: "networking.k8s.io", Resource: "ingressclasses"}:                               ingressClassPrinter,
	{Group: "networking.k8s.io", Resource: "networkpolicies"}:                              networkPolicyPrinter,
	{Group: "coordination.k8s.io", Resource: "leases"}:                                     leasePrinter,
	{Group: "policy", Resource: "poddisruptionbudgets"}:                                    pdbPrinter,
	{Group: "events.k8s.io", Resource: "events"}:                                           eventPrinter,
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}:       vapPrinter,
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"}: vapBindingPrinter,
	{Group: "storage.k8s.io", Resource: "storageclasses"}:                                  storageClassPrinter,

	{Group: "rbac.authorization.k8s.io", Resource: "roles"}:                              rolePrinter,
	{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}:                       clusterRolePrinter,
	{Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}:                       roleBindingPrinter,
	{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}:                clusterRoleBindingPrinter,
	{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}: validatingWebhookPrinter,
	{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}:   mutatingWebhookPrinter,
	{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}:               csrPrinter,

	{Group: "scheduling.k8s.io", Resource: "priorityclasses"}:    priorityClassPrinter,
	{Group: "node.k8s.io", Resource: "runtimeclasses"}:           runtimeClassPrinter,
	{Group: "autoscaling", Resource: "horizontalpodautoscalers"}: hpaPrinter,
}
