// Package fleet reports the state of many sites through the one thing they share: the git
// repository they deploy from. Each site's leader writes a small JSON document (Status) as
// the only file of a parentless commit and force-pushes it to a ref of its own
// (refs/flotilla/status/<site>, or branch flotilla-status/<site> where a git host refuses
// other refs), so the repository keeps one commit per site however often it reports.
// Read lists those refs and decodes every document; Summarize and the Write* functions of
// format.go turn them into the table of `flotilla fleet status`.
package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// Limits of a status document. A document is read by every `fleet status` of every site's
// operator, so a site must not be able to make it large: the free-text fields are cut to
// MaxMessage on write (they come from the cluster and a long one must not stop the report),
// every other field that is too large is refused.
const (
	// MaxDocument is the largest encoded document, written or read.
	MaxDocument = 16 << 10
	// MaxMessage is the longest message and rollback reason, in bytes.
	MaxMessage = 2 << 10
	// maxShort bounds the other strings (reason, version).
	maxShort = 256
	// maxRevision bounds the revision strings ("<ref>@sha1:<40 hex>").
	maxRevision = 512
	// maxLabels is the most labels a site may carry.
	maxLabels = 32
	// maxStatusInterval is the longest heartbeat period a site may promise.
	maxStatusInterval = 7 * 24 * 3600
)

// Status is what one site reports. The JSON field names are a stable format: readers of
// older and newer flotilla versions read each other's documents (unknown fields are
// ignored on read).
type Status struct {
	// Site is the site's name, a DNS label (RFC 1123, at most 63 characters); it names
	// the ref the document is written to.
	Site string `json:"site"`
	// Labels are the site's labels (such as region=eu), Kubernetes label syntax.
	Labels map[string]string `json:"labels,omitempty"`
	// Source is the GitSource the site reports on, "namespace/name".
	Source string `json:"source,omitempty"`
	// Revision is the revision applied, "<ref>@sha1:<commit>" (empty before the first).
	Revision string `json:"revision,omitempty"`
	// RevisionTime is when the site first applied Revision.
	RevisionTime time.Time `json:"revisionTime,omitzero"`
	// Health is the source's health: Healthy, Progressing, Degraded or Unknown.
	Health string `json:"health"`
	// Ready, Reason and Message are those of the source's Ready condition.
	Ready   bool   `json:"ready"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// RolledBack is set while the site runs an older revision in place of one that did
	// not become healthy.
	RolledBack *RolledBack `json:"rolledBack,omitempty"`
	// HealthySince is when Revision became healthy (zero while it is not): the soak of
	// other sites' spec.rollout counts from it.
	HealthySince time.Time `json:"healthySince,omitzero"`
	// Held is set while the site holds a newer revision back (spec.rollout waits for other
	// sites, or one of them failed it).
	Held *Held `json:"held,omitempty"`
	// Hosts counts the site's hosts, and how many of them are ready.
	Hosts Hosts `json:"hosts"`
	// Workloads counts the source's workloads, and how many of them are available.
	Workloads Workloads `json:"workloads"`
	// Time is when the site wrote the report.
	Time time.Time `json:"time"`
	// StatusInterval is the heartbeat period the site promises, in seconds: a report older
	// than three of them is stale.
	StatusInterval int64 `json:"statusInterval"`
	// Version is the version of flotilla that wrote the report.
	Version string `json:"version,omitempty"`
}

// RolledBack says that Revision did not become healthy and To runs in its place.
type RolledBack struct {
	Revision string `json:"revision"`
	To       string `json:"to"`
	Reason   string `json:"reason,omitempty"`
}

// Held is a revision a site fetched and holds back, and why.
type Held struct {
	Revision string `json:"revision"`
	Reason   string `json:"reason,omitempty"`
}

// Hosts counts a site's hosts.
type Hosts struct {
	Ready int `json:"ready"`
	Total int `json:"total"`
}

// Workloads counts a source's workloads.
type Workloads struct {
	Available int `json:"available"`
	Total     int `json:"total"`
}

// Interval is StatusInterval as a duration.
func (s *Status) Interval() time.Duration { return time.Duration(s.StatusInterval) * time.Second }

// normalize cuts the free-text fields to MaxMessage (on a rune boundary) and puts the
// times in UTC, so the document does not depend on the writer's time zone.
func (s *Status) normalize() {
	s.Message = truncate(s.Message, MaxMessage)
	if s.RolledBack != nil {
		rb := *s.RolledBack
		rb.Reason = truncate(rb.Reason, MaxMessage)
		s.RolledBack = &rb
	}
	if s.Held != nil {
		h := *s.Held
		h.Reason = truncate(h.Reason, MaxMessage)
		s.Held = &h
	}
	if !s.HealthySince.IsZero() {
		s.HealthySince = s.HealthySince.UTC()
	}
	s.Time = s.Time.UTC()
	if !s.RevisionTime.IsZero() {
		s.RevisionTime = s.RevisionTime.UTC()
	}
}

// truncate cuts s to at most n bytes, ending in "..." when cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// Validate checks every field; the error names the field and says what is allowed.
func (s *Status) Validate() error {
	if errs := validation.IsDNS1123Label(s.Site); len(errs) > 0 {
		return fmt.Errorf("site %q: %s (the site name names the ref refs/flotilla/status/<site>)", s.Site, strings.Join(errs, "; "))
	}
	if len(s.Labels) > maxLabels {
		return fmt.Errorf("labels: %d labels, at most %d are reported: drop some", len(s.Labels), maxLabels)
	}
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(s.Labels[k]); len(errs) > 0 {
			return fmt.Errorf("label %s value %q: %s", k, s.Labels[k], strings.Join(errs, "; "))
		}
	}
	if s.Source != "" {
		ns, name, ok := strings.Cut(s.Source, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			return fmt.Errorf("source %q: want the GitSource as namespace/name", s.Source)
		}
	}
	for _, f := range []struct {
		name, value string
		max         int
	}{
		{"revision", s.Revision, maxRevision},
		{"reason", s.Reason, maxShort},
		{"message", s.Message, MaxMessage},
		{"version", s.Version, maxShort},
	} {
		if err := checkText(f.name, f.value, f.max); err != nil {
			return err
		}
	}
	if s.RolledBack != nil {
		if s.RolledBack.Revision == "" || s.RolledBack.To == "" {
			return fmt.Errorf("rolledBack: revision and to must both be set (or rolledBack omitted)")
		}
		for _, f := range []struct {
			name, value string
			max         int
		}{
			{"rolledBack.revision", s.RolledBack.Revision, maxRevision},
			{"rolledBack.to", s.RolledBack.To, maxRevision},
			{"rolledBack.reason", s.RolledBack.Reason, MaxMessage},
		} {
			if err := checkText(f.name, f.value, f.max); err != nil {
				return err
			}
		}
	}
	if s.Held != nil {
		if s.Held.Revision == "" {
			return fmt.Errorf("held: revision must be set (or held omitted)")
		}
		if err := checkText("held.revision", s.Held.Revision, maxRevision); err != nil {
			return err
		}
		if err := checkText("held.reason", s.Held.Reason, MaxMessage); err != nil {
			return err
		}
	}
	switch s.Health {
	case v1alpha1.HealthHealthy, v1alpha1.HealthProgressing, v1alpha1.HealthDegraded, v1alpha1.HealthUnknown:
	default:
		return fmt.Errorf("health %q: want Healthy, Progressing, Degraded or Unknown", s.Health)
	}
	if s.Hosts.Total < 0 || s.Hosts.Ready < 0 || s.Hosts.Ready > s.Hosts.Total {
		return fmt.Errorf("hosts %d/%d: want 0 <= ready <= total", s.Hosts.Ready, s.Hosts.Total)
	}
	if s.Workloads.Total < 0 || s.Workloads.Available < 0 || s.Workloads.Available > s.Workloads.Total {
		return fmt.Errorf("workloads %d/%d: want 0 <= available <= total", s.Workloads.Available, s.Workloads.Total)
	}
	if s.Time.IsZero() {
		return fmt.Errorf("time: set it to when the report is written")
	}
	if s.StatusInterval <= 0 || s.StatusInterval > maxStatusInterval {
		return fmt.Errorf("statusInterval %d: want the heartbeat period in seconds, 1 to %d", s.StatusInterval, maxStatusInterval)
	}
	return nil
}

// checkText refuses a string longer than max bytes, not UTF-8, or (except in a message)
// with control characters.
func checkText(field, v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("%s: %d bytes, at most %d are allowed", field, len(v), max)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%s: not valid UTF-8", field)
	}
	if field == "message" || field == "rolledBack.reason" || field == "held.reason" {
		return nil
	}
	if i := strings.IndexFunc(v, unicode.IsControl); i >= 0 {
		return fmt.Errorf("%s %q: control character at byte %d", field, v, i)
	}
	return nil
}

// Encode normalizes and validates st and returns the document written as status.json.
func Encode(st Status) ([]byte, error) {
	st.normalize()
	if err := st.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(&st, "", "  ")
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if len(b) > MaxDocument {
		return nil, fmt.Errorf("status of site %s: the document takes %d bytes, at most %d are allowed: shorten the labels or messages", st.Site, len(b), MaxDocument)
	}
	return b, nil
}

// Decode reads and validates a status.json document.
func Decode(b []byte) (Status, error) {
	var st Status
	if len(b) > MaxDocument {
		return st, fmt.Errorf("status.json takes %d bytes, at most %d are allowed", len(b), MaxDocument)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&st); err != nil {
		return st, fmt.Errorf("status.json is not a status document: %w", err)
	}
	if dec.More() {
		return st, fmt.Errorf("status.json: more than one JSON value")
	}
	if err := st.Validate(); err != nil {
		return st, fmt.Errorf("status.json: %w", err)
	}
	return st, nil
}
