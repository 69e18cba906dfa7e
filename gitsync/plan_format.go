package gitsync

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// MarkdownLimit keeps a markdown plan under GitHub's 65,536-character comment limit:
// diffs past it are left out with a note.
const MarkdownLimit = 60000

var planSymbols = map[PlanAction]string{
	PlanCreate: "+", PlanUpdate: "~", PlanDelete: "-", PlanKeep: "=", PlanUnchanged: " ", PlanInvalid: "!", PlanRendered: "*",
}

// Summary is the plan's one-line count, e.g. "Plan: 1 to create, 2 to update, 0 to delete,
// 5 unchanged, 1 kept, 2 pod(s) would stay Pending, 1 invalid."
func (p *Plan) Summary() string {
	c := p.Counts()
	if p.Offline {
		s := fmt.Sprintf("Rendered %d object(s) from %s (offline: not compared with a cluster)", c.Rendered+c.Invalid, p.Path)
		if c.Invalid > 0 {
			s += fmt.Sprintf(", %d invalid: nothing of this revision would be applied", c.Invalid)
		}
		return s + "."
	}
	s := fmt.Sprintf("Plan: %d to create, %d to update, %d to delete, %d unchanged", c.Create, c.Update, c.Delete, c.Unchanged)
	if c.Keep > 0 {
		s += fmt.Sprintf(", %d kept", c.Keep)
	}
	if n := p.Pending(); n > 0 {
		s += fmt.Sprintf(", %d pod(s) would stay Pending", n)
	}
	if c.Invalid > 0 {
		s += fmt.Sprintf(", %d invalid: nothing of this revision would be applied", c.Invalid)
	}
	return s + "."
}

// Ref is "Kind namespace/name" (or "Kind name" for cluster-scoped objects).
func (it PlanItem) Ref() string {
	if it.Namespace != "" {
		return it.Kind + " " + it.Namespace + "/" + it.Name
	}
	return it.Kind + " " + it.Name
}

// planChangeLines spells the changes as diff lines: "- path: old" and "+ path: new".
func planChangeLines(cs []FieldChange) []string {
	var out []string
	for _, c := range cs {
		if c.Old != "" {
			out = append(out, "- "+c.Path+": "+c.Old)
		}
		if c.New != "" {
			out = append(out, "+ "+c.Path+": "+c.New)
		}
	}
	return out
}

// planOfflineNote says what an offline plan checked.
const planOfflineNote = "offline: every object validated as flotilla's API would, nothing compared with a cluster, site-dependent checks skipped"

// Text is the plan for a terminal: one line per object (unchanged objects only counted),
// the changed fields of updates indented below, then the scheduling simulation (a line per
// workload with pods that would stay Pending, with the scheduler's reason, the others
// counted in one line, and a line per node with its requests before and after), the
// summary last. Offline, the invalid objects come first, then every valid one with its
// file.
func (p *Plan) Text() string {
	var b strings.Builder
	if p.Offline {
		fmt.Fprintf(&b, "flotilla plan: path %s (%s)\n", p.Path, planOfflineNote)
		for _, it := range p.Items {
			if it.Action == PlanInvalid {
				fmt.Fprintf(&b, "! invalid  %s\n", it.Reason)
			}
		}
		for _, it := range p.Items {
			if it.Action != PlanInvalid {
				fmt.Fprintf(&b, "%s%s\n", planPrefixFile(it.File), it.Ref())
			}
		}
		b.WriteString(p.Summary() + "\n")
		return b.String()
	}
	fmt.Fprintf(&b, "flotilla plan: GitSource %s, path %s\n", p.Source, p.Path)
	if p.RolledBack != "" {
		fmt.Fprintf(&b, "rolled back: %s\n", p.RolledBack)
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	for _, it := range p.Items {
		switch it.Action {
		case PlanUnchanged:
			continue
		case PlanInvalid:
			fmt.Fprintf(&b, "! invalid  %s\n", it.Reason)
			continue
		}
		line := fmt.Sprintf("%s %-9s %s", planSymbols[it.Action], it.Action, it.Ref())
		if it.File != "" {
			line += " (" + it.File + ")"
		}
		if it.Reason != "" {
			line += ": " + it.Reason
		}
		b.WriteString(line + "\n")
		if it.Action == PlanUpdate {
			for _, l := range planChangeLines(it.Changes) {
				b.WriteString("      " + l + "\n")
			}
		}
	}
	if r := p.Scheduling; r != nil {
		fmt.Fprintf(&b, "Scheduling (simulated on %d nodes):\n", r.Nodes)
		fits, pods := 0, 0
		for _, w := range r.Workloads {
			if w.Pending == 0 {
				fits, pods = fits+1, pods+w.Pods
				continue
			}
			fmt.Fprintf(&b, "! %s: %d of %d pods fit, %d would stay Pending: %s\n", w.Ref(), w.Fit, w.Pods, w.Pending, w.Reason)
		}
		if fits > 0 {
			fmt.Fprintf(&b, "  %d workload(s) fit entirely: %d pod(s)\n", fits, pods)
		}
		for _, n := range r.Capacity {
			fmt.Fprintf(&b, "  %s: cpu %s, memory %s, pods %s\n", n.Name, planCPUChange(n), planMemoryChange(n), planPodsChange(n))
		}
	}
	b.WriteString(p.Summary() + "\n")
	return b.String()
}

// planCPUChange is "350m -> 1350m of 2 (67%)": requested before and after, of allocatable.
func planCPUChange(n NodeCapacity) string {
	return fmt.Sprintf("%s -> %s of %s%s", planCPU(n.Before.CPUMillis), planCPU(n.After.CPUMillis),
		planCPU(n.Allocatable.CPUMillis), planPercent(n.After.CPUMillis, n.Allocatable.CPUMillis))
}

// planMemoryChange is "1.0Gi -> 9.0Gi of 23.2Gi (38%)".
func planMemoryChange(n NodeCapacity) string {
	return fmt.Sprintf("%s -> %s of %s%s", planMemory(n.Before.MemoryBytes), planMemory(n.After.MemoryBytes),
		planMemory(n.Allocatable.MemoryBytes), planPercent(n.After.MemoryBytes, n.Allocatable.MemoryBytes))
}

// planPodsChange is "9 -> 12 of 110".
func planPodsChange(n NodeCapacity) string {
	return fmt.Sprintf("%d -> %d of %d", n.Before.Pods, n.After.Pods, n.Allocatable.Pods)
}

// planCPU spells millicores as the API does: whole cores as "2", the rest as "350m".
func planCPU(m int64) string {
	if m%1000 == 0 {
		return strconv.FormatInt(m/1000, 10)
	}
	return strconv.FormatInt(m, 10) + "m"
}

// planMemory spells bytes in Gi with one decimal from 1Gi on, in Mi below.
func planMemory(b int64) string {
	switch {
	case b == 0:
		return "0"
	case b >= 1<<30 || b <= -(1<<30):
		return fmt.Sprintf("%.1fGi", float64(b)/(1<<30))
	case b%(1<<20) == 0:
		return fmt.Sprintf("%dMi", b>>20)
	case b >= 1<<20:
		return fmt.Sprintf("%.1fMi", float64(b)/(1<<20))
	}
	return strconv.FormatInt(b, 10)
}

// planPercent is " (38%)", the share of total that used is, rounded down (100% means
// full); "" without a total.
func planPercent(used, total int64) string {
	if total <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%d%%)", used*100/total)
}

func planPrefixFile(f string) string {
	if f == "" {
		return ""
	}
	return f + ": "
}

// Markdown is the plan as a pull-request comment: the summary first (⚠️ when pods would
// stay Pending and nothing is invalid), a table of what changes (and what is invalid or
// kept), the scheduling simulation (a table of the workloads with pending pods, the nodes'
// capacity collapsed), then each object's field diff in a collapsible <details> block;
// unchanged objects are listed in one collapsed block.
func (p *Plan) Markdown() string {
	var b strings.Builder
	icon := "✅"
	switch c := p.Counts(); {
	case c.Invalid > 0:
		icon = "❌"
	case p.Pending() > 0:
		icon = "⚠️"
	case p.HasChanges():
		icon = "📝"
	}
	if p.Offline && icon != "❌" {
		icon = "📄"
	}
	fmt.Fprintf(&b, "%s **flotilla plan** `%s`: %s\n\n", icon, p.Path, p.Summary())
	if p.Source != "" {
		fmt.Fprintf(&b, "GitSource `%s`, path `%s`.\n\n", p.Source, p.Path)
	}
	if p.RolledBack != "" {
		fmt.Fprintf(&b, "> ⏪ The source is rolled back: %s\n\n", planMdCell(p.RolledBack))
	}
	if p.Offline {
		b.WriteString(strings.ToUpper(planOfflineNote[:1]) + planOfflineNote[1:] + ".\n\n")
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "> ⚠️ %s\n\n", planMdCell(w))
	}
	var rows, unchanged []PlanItem
	for _, it := range p.Items {
		if it.Action == PlanUnchanged {
			unchanged = append(unchanged, it)
		} else {
			rows = append(rows, it)
		}
	}
	if len(rows) > 0 {
		b.WriteString("| | Action | Object | File | Details |\n|---|---|---|---|---|\n")
		for _, it := range rows {
			detail := it.Reason
			if it.Action == PlanUpdate {
				detail = fmt.Sprintf("%d field(s) change", len(it.Changes))
			}
			object := it.Ref()
			if it.Action == PlanInvalid {
				if it.Kind == "" {
					object = ""
				} else {
					// The table already names the file and object.
					detail = strings.TrimPrefix(detail, planPrefixFile(it.File)+it.Ref()+": ")
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", planSymbols[it.Action], it.Action, planMdCode(object), planMdCode(it.File), planMdCell(detail))
		}
		b.WriteString("\n")
	}
	p.markdownScheduling(&b)
	omitted := 0
	for _, it := range rows {
		if len(it.Changes) == 0 || (it.Action != PlanUpdate && it.Action != PlanCreate) {
			continue
		}
		block := fmt.Sprintf("<details><summary>%s %s <code>%s</code> (%d field(s))</summary>\n\n```diff\n%s\n```\n\n</details>\n",
			planSymbols[it.Action], it.Action, planHtmlEscape(it.Ref()), len(it.Changes), strings.ReplaceAll(strings.Join(planChangeLines(it.Changes), "\n"), "```", "`` `"))
		if b.Len()+len(block) > MarkdownLimit {
			omitted++
			continue
		}
		b.WriteString(block)
	}
	if len(unchanged) > 0 {
		var names []string
		for _, it := range unchanged {
			names = append(names, "`"+it.Ref()+"`")
		}
		block := fmt.Sprintf("<details><summary>%d unchanged</summary>\n\n%s\n\n</details>\n", len(unchanged), strings.Join(names, ", "))
		if b.Len()+len(block) <= MarkdownLimit {
			b.WriteString(block)
		}
	}
	if omitted > 0 {
		fmt.Fprintf(&b, "\n%d diff(s) left out to fit a comment: run `flotilla plan` for all of them.\n", omitted)
	}
	return b.String()
}

// markdownScheduling writes the scheduling simulation: a table of the workloads with pods
// that would stay Pending, and the nodes' capacity in a collapsed table.
func (p *Plan) markdownScheduling(b *strings.Builder) {
	r := p.Scheduling
	if r == nil {
		return
	}
	pods := 0
	var pending []WorkloadScheduling
	for _, w := range r.Workloads {
		pods += w.Pods
		if w.Pending > 0 {
			pending = append(pending, w)
		}
	}
	if len(pending) == 0 {
		fmt.Fprintf(b, "**Scheduling** (simulated on %d nodes): the %d pod(s) of %d workload(s) fit.\n\n", r.Nodes, pods, len(r.Workloads))
	} else {
		fmt.Fprintf(b, "**Scheduling** (simulated on %d nodes): %d of %d pod(s) would stay Pending.\n\n", r.Nodes, r.Pending, pods)
		b.WriteString("| Workload | Pods | Fit | Pending | Why |\n|---|---|---|---|---|\n")
		for _, w := range pending {
			fmt.Fprintf(b, "| %s | %d | %d | %d | %s |\n", planMdCode(w.Ref()), w.Pods, w.Fit, w.Pending, planMdCell(w.Reason))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "<details><summary>Capacity of %d node(s): requested now -> with this revision</summary>\n\n", len(r.Capacity))
	b.WriteString("| Node | CPU | Memory | Pods |\n|---|---|---|---|\n")
	for _, n := range r.Capacity {
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", planMdCode(n.Name), planMdCell(planCPUChange(n)), planMdCell(planMemoryChange(n)), planPodsChange(n))
	}
	b.WriteString("\n</details>\n\n")
}

// JSON is the plan as indented JSON (the Plan type's fields).
func (p *Plan) JSON() ([]byte, error) {
	return json.MarshalIndent(p, "", "  ")
}

// planMdCell makes s safe inside a table cell: pipes escaped, one line.
func planMdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "\r", "")
	return strings.ReplaceAll(s, "\n", "<br>")
}

func planMdCode(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(planMdCell(s), "`", "'") + "`"
}

func planHtmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
