package gitsync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// A site's identity in a fleet (flotilla agent --site, --site-labels) is recorded once, by
// the first host, in ConfigMap kube-system/flotilla-site: every host of the site checks its
// flags against it, labels its Node with it, and gitsync reports and waits by it.
const (
	SiteNamespace = "kube-system"
	SiteConfigMap = "flotilla-site"
	// SiteLabel is the Node label naming the site.
	SiteLabel = "flotilla.dev/site"
	// keys of SiteConfigMap's data.
	siteNameKey   = "name"
	siteLabelsKey = "labels"
)

// Site is a site's name and labels.
type Site struct {
	Name   string
	Labels map[string]string
}

// NodeLabels are the labels a host of the site carries on its Node: the site's labels and
// SiteLabel.
func (s Site) NodeLabels() map[string]string {
	out := maps.Clone(s.Labels)
	if out == nil {
		out = map[string]string{}
	}
	out[SiteLabel] = s.Name
	return out
}

// FormatSiteLabels writes labels as "k=v,k2=v2", sorted by key.
func FormatSiteLabels(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}

// ParseSiteLabels reads "k=v,k2=v2".
func ParseSiteLabels(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return map[string]string{}, nil
	}
	set, err := labels.ConvertSelectorToLabelsMap(s)
	if err != nil {
		return nil, fmt.Errorf("site labels %q: %v: write them as key=value,key2=value2", s, err)
	}
	out := map[string]string(set)
	if n := len(strings.Split(strings.Trim(s, ", "), ",")); n != len(out) {
		return nil, fmt.Errorf("site labels %q: a key is given twice: write each key once, as key=value,key2=value2", s)
	}
	return out, ValidateSite(Site{Name: "x", Labels: out})
}

// ValidateSite checks a site's name (a DNS label: it names a git ref) and labels (label
// syntax; none under kubernetes.io, k8s.io or flotilla.dev, which belong to Kubernetes and
// flotilla).
func ValidateSite(s Site) error {
	if msgs := validation.IsDNS1123Label(s.Name); len(msgs) > 0 {
		return fmt.Errorf("site name %q: %s (it names the git ref the site reports to)", s.Name, strings.Join(msgs, "; "))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return fmt.Errorf("site label key %q: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(s.Labels[k]); len(msgs) > 0 {
			return fmt.Errorf("site label %s value %q: %s", k, s.Labels[k], strings.Join(msgs, "; "))
		}
		if prefix, _, ok := strings.Cut(k, "/"); ok {
			for _, reserved := range []string{"kubernetes.io", "k8s.io", "flotilla.dev"} {
				if prefix == reserved || strings.HasSuffix(prefix, "."+reserved) {
					return fmt.Errorf("site label %s: keys under %s are reserved; use your own prefix or none (such as tier=canary)", k, reserved)
				}
			}
		}
	}
	return nil
}

// ErrSiteMismatch is a host whose --site or --site-labels differ from the site's record: it
// must not start (it would report, and wait, as another site).
var ErrSiteMismatch = errors.New("the site's identity differs")

// DefaultSiteName is the site name a first host without --site gives its site: its own
// host name's first label.
func DefaultSiteName(hostName string) string {
	name, _, _ := strings.Cut(strings.ToLower(hostName), ".")
	return name
}

// EnsureSite records the site's identity when no host has (name, or DefaultSiteName of
// hostName when name is empty; labels), and otherwise checks name and labels (when given)
// against the record: a difference is an ErrSiteMismatch saying what to change. It returns
// the site as recorded.
func EnsureSite(ctx context.Context, kube kubernetes.Interface, name string, labels map[string]string, labelsGiven bool, hostName string) (Site, error) {
	cms := kube.CoreV1().ConfigMaps(SiteNamespace)
	cm, err := cms.Get(ctx, SiteConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		want := Site{Name: name, Labels: labels}
		if want.Name == "" {
			want.Name = DefaultSiteName(hostName)
		}
		if err := ValidateSite(want); err != nil {
			return Site{}, fmt.Errorf("%w: start this host with --site NAME", err)
		}
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: SiteNamespace, Name: SiteConfigMap},
			Data: map[string]string{siteNameKey: want.Name, siteLabelsKey: FormatSiteLabels(want.Labels)}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err == nil {
			return want, nil
		} else if !apierrors.IsAlreadyExists(err) {
			return Site{}, fmt.Errorf("record the site in ConfigMap %s/%s: %w", SiteNamespace, SiteConfigMap, err)
		}
		// Another host recorded it first: check against its record.
		if cm, err = cms.Get(ctx, SiteConfigMap, metav1.GetOptions{}); err != nil {
			return Site{}, err
		}
	} else if err != nil {
		return Site{}, fmt.Errorf("read ConfigMap %s/%s: %w", SiteNamespace, SiteConfigMap, err)
	}
	have, err := siteOf(cm)
	if err != nil {
		return Site{}, err
	}
	if name != "" && name != have.Name {
		return Site{}, fmt.Errorf("%w: --site %s, but this site is named %s (recorded by its first host in ConfigMap %s/%s): start this host with --site %s or without --site",
			ErrSiteMismatch, name, have.Name, SiteNamespace, SiteConfigMap, have.Name)
	}
	if labelsGiven && FormatSiteLabels(labels) != FormatSiteLabels(have.Labels) {
		return Site{}, fmt.Errorf("%w: --site-labels %q, but the site's labels are %q (ConfigMap %s/%s): start this host with --site-labels %q or without it; to change the site's labels, edit the ConfigMap first",
			ErrSiteMismatch, FormatSiteLabels(labels), FormatSiteLabels(have.Labels), SiteNamespace, SiteConfigMap, FormatSiteLabels(have.Labels))
	}
	return have, nil
}

// ReadSite reads the site's identity (NotFound before a host recorded it).
func ReadSite(ctx context.Context, kube kubernetes.Interface) (Site, error) {
	cm, err := kube.CoreV1().ConfigMaps(SiteNamespace).Get(ctx, SiteConfigMap, metav1.GetOptions{})
	if err != nil {
		return Site{}, err
	}
	return siteOf(cm)
}

func siteOf(cm *corev1.ConfigMap) (Site, error) {
	s := Site{Name: cm.Data[siteNameKey]}
	labels, err := ParseSiteLabels(cm.Data[siteLabelsKey])
	if err == nil {
		s.Labels = labels
		err = ValidateSite(s)
	}
	if err != nil {
		return Site{}, fmt.Errorf("ConfigMap %s/%s: %w: correct it (data.name: the site's name; data.labels: k=v,k2=v2)", SiteNamespace, SiteConfigMap, err)
	}
	return s, nil
}
