package validation

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/labels"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	flotillav1alpha1 "github.com/flotilla-dev/flotilla/reconciler/apiserver/apis/flotilla/v1alpha1"
)

// The forms of spec.url a GitSource accepts, named in the errors that refuse the others.
const acceptedGitURLs = "https://, ssh://, user@host:path or file:///absolute/path " +
	"(http:// and git:// only with spec.insecure: true)"

// gitURL is a spec.url taken apart as far as validation and warnings need.
type gitURL struct {
	// scheme is "https", "http", "ssh", "git" or "file" for a URL, "scp" for user@host:path,
	// "" for a local path, or the unsupported scheme as written.
	scheme string
	// shown is the URL with any credentials replaced, safe to repeat in an error.
	shown string
}

// plain reports whether the URL fetches without TLS or SSH (http://, git://).
func (u gitURL) plain() bool { return u.scheme == "http" || u.scheme == "git" }

// label names the transport in messages: "https://", or "ssh" for user@host:path.
func (u gitURL) label() string {
	if u.scheme == "scp" {
		return "ssh (user@host:path)"
	}
	return u.scheme + "://"
}

// ValidateGitSource checks a GitSource as the server stores it, spec defaulted.
// The shortest spec.interval is MinInterval (see validateGitSourceSpec for a site's own).
func ValidateGitSource(gs *flotillav1alpha1.GitSource) field.ErrorList {
	return validateGitSource(gs, flotillav1alpha1.MinInterval)
}

func validateGitSource(gs *flotillav1alpha1.GitSource, minInterval time.Duration) field.ErrorList {
	errs := validateMeta(&gs.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateGitSourceSpec(gs, specPath, minInterval)...)
}

// ValidateGitURL checks a repository URL as spec.url of a GitSource with spec.insecure set
// to insecure is checked; errors are reported at fld.
func ValidateGitURL(raw string, insecure bool, fld *field.Path) field.ErrorList {
	gs := &flotillav1alpha1.GitSource{Spec: flotillav1alpha1.GitSourceSpec{URL: raw, Insecure: insecure}}
	var errs field.ErrorList
	for _, e := range validateGitSourceSpec(gs, field.NewPath("spec"), flotillav1alpha1.MinInterval) {
		if e.Field == "spec.url" {
			e.Field = fld.String()
			errs = append(errs, e)
		}
	}
	return errs
}

// ValidateGitSourceUpdate checks an update of a GitSource: the new object as on create, and
// the metadata that cannot change.
func ValidateGitSourceUpdate(gs, old *flotillav1alpha1.GitSource) field.ErrorList {
	return validateGitSourceUpdate(gs, old, flotillav1alpha1.MinInterval)
}

func validateGitSourceUpdate(gs, old *flotillav1alpha1.GitSource, minInterval time.Duration) field.ErrorList {
	errs := validateMetaUpdate(&gs.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateGitSourceSpec(gs, specPath, minInterval)...)
}

// GitSourceWarnings lists the warnings the API answers to a create (old nil) or update of a
// GitSource: a source that works but is not safe, or a setting that does nothing. An update
// that leaves the spec as it was gets none, so re-applying an unchanged source is quiet.
func GitSourceWarnings(gs, old *flotillav1alpha1.GitSource) []string {
	if !gs.Spec.Insecure {
		return nil
	}
	if old != nil && apiequality.Semantic.DeepEqual(gs.Spec, old.Spec) {
		return nil
	}
	u, errs := parseGitURL(gs.Spec.URL, specPath.Child("url"))
	if len(errs) != 0 {
		return nil
	}
	if !u.plain() {
		how := "over TLS"
		switch u.scheme {
		case "ssh", "scp":
			how = "over SSH"
		case "file":
			how = "from the host's disk"
		}
		return []string{fmt.Sprintf("spec.insecure has no effect: %s URLs are fetched %s; remove it", u.label(), how)}
	}
	if v := gs.Spec.Verify; v != nil && v.Mode == flotillav1alpha1.VerifyModeHead {
		return []string{fmt.Sprintf("spec.insecure: the repository is fetched over %s without TLS: "+
			"spec.verify refuses unsigned commits, but a network attacker can hold back new ones; use https:// or ssh://", u.label())}
	}
	return []string{fmt.Sprintf("spec.insecure: the repository is fetched over %s without TLS: "+
		"a network attacker can change what is applied; set spec.verify to require signed commits", u.label())}
}

// validateGitSourceSpec checks the spec; minInterval is the site's shortest interval
// (Options.GitSourceMinInterval).
func validateGitSourceSpec(gs *flotillav1alpha1.GitSource, p *field.Path, minInterval time.Duration) field.ErrorList {
	s := &gs.Spec
	var errs field.ErrorList

	u, urlErrs := parseGitURL(s.URL, p.Child("url"))
	errs = append(errs, urlErrs...)
	if len(urlErrs) == 0 && u.plain() {
		if !s.Insecure {
			errs = append(errs, field.Invalid(p.Child("url"), u.shown, fmt.Sprintf(
				"%s sends the repository (and any credentials) in the clear: use https://, or set spec.insecure: true to accept it", u.label())))
		}
		if s.SecretRef != nil {
			errs = append(errs, field.Forbidden(p.Child("secretRef"), fmt.Sprintf(
				"credentials are never sent over %s: use an https:// or ssh:// URL, or remove spec.secretRef", u.label())))
		}
	}

	if s.Ref != nil {
		errs = append(errs, validateGitRef(s.Ref, p.Child("ref"))...)
	}
	errs = append(errs, validateRepoPath(s.Path, p.Child("path"))...)

	// Zero is what a caller that skips defaulting sends; the server stores DefaultInterval.
	if d := s.Interval.Duration; d != 0 && d < minInterval {
		errs = append(errs, field.Invalid(p.Child("interval"), s.Interval.Duration.String(), fmt.Sprintf(
			"must be at least %s: set %s or more (to fetch as soon as a commit is pushed, set spec.webhookSecretRef)",
			minInterval, minInterval)))
	}
	if s.Timeout != nil && s.Timeout.Duration <= 0 {
		errs = append(errs, field.Invalid(p.Child("timeout"), s.Timeout.Duration.String(),
			"must be greater than zero: set a positive duration, or remove it to use the interval"))
	}

	if r := s.Rollback; r != nil && r.HealthTimeout != nil && r.HealthTimeout.Duration < flotillav1alpha1.MinHealthTimeout {
		errs = append(errs, field.Invalid(p.Child("rollback", "healthTimeout"), r.HealthTimeout.Duration.String(), fmt.Sprintf(
			"must be at least %s: the pods of a revision need time to start; set %s or more, or remove it for the default %s",
			flotillav1alpha1.MinHealthTimeout, flotillav1alpha1.MinHealthTimeout, flotillav1alpha1.DefaultHealthTimeout)))
	}

	errs = append(errs, validateRollout(s.Rollout, p.Child("rollout"))...)
	if sp := s.StatusPush; sp != nil {
		if sp.Interval != nil && sp.Interval.Duration < flotillav1alpha1.MinStatusInterval {
			errs = append(errs, field.Invalid(p.Child("statusPush", "interval"), sp.Interval.Duration.String(), fmt.Sprintf(
				"must be at least %s: set %s or more, or remove it for the default %s (the status is published at once after every apply and change of health anyway)",
				flotillav1alpha1.MinStatusInterval, flotillav1alpha1.MinStatusInterval, flotillav1alpha1.DefaultStatusInterval)))
		}
		errs = append(errs, validateSecretRef(sp.SecretRef, p.Child("statusPush", "secretRef"))...)
		if sp.SecretRef != nil && len(urlErrs) == 0 && u.plain() {
			errs = append(errs, field.Forbidden(p.Child("statusPush", "secretRef"), fmt.Sprintf(
				"credentials are never sent over %s: use an https:// or ssh:// URL, or remove spec.statusPush.secretRef", u.label())))
		}
	}

	errs = append(errs, validateSecretRef(s.SecretRef, p.Child("secretRef"))...)
	errs = append(errs, validateSecretRef(s.WebhookSecretRef, p.Child("webhookSecretRef"))...)
	if v := s.Verify; v != nil {
		vp := p.Child("verify")
		switch v.Mode {
		case flotillav1alpha1.VerifyModeNone:
		case flotillav1alpha1.VerifyModeHead:
			if v.SecretRef == nil {
				errs = append(errs, field.Required(vp.Child("secretRef"),
					`mode "head" needs the Secret holding the trusted OpenPGP public keys: set secretRef.name`))
			}
		case "":
			errs = append(errs, field.Required(vp.Child("mode"), `set "head" to require a signed commit, or "none"`))
		default:
			errs = append(errs, field.NotSupported(vp.Child("mode"), v.Mode,
				[]flotillav1alpha1.VerifyMode{flotillav1alpha1.VerifyModeNone, flotillav1alpha1.VerifyModeHead}))
		}
		errs = append(errs, validateSecretRef(v.SecretRef, vp.Child("secretRef"))...)
	}

	errs = append(errs, validateDependsOn(gs, p.Child("dependsOn"))...)
	if s.ServiceAccountName != "" {
		// The name a ServiceAccount may have (ValidateServiceAccountName: a DNS subdomain).
		errs = append(errs, isDNSSubdomain(p.Child("serviceAccountName"), s.ServiceAccountName)...)
	}
	return errs
}

// parseGitURL checks spec.url's form, leaving the insecure schemes to the caller.
func parseGitURL(raw string, p *field.Path) (gitURL, field.ErrorList) {
	if raw == "" {
		return gitURL{}, field.ErrorList{field.Required(p, "set the repository's URL: "+acceptedGitURLs)}
	}
	if strings.TrimSpace(raw) != raw {
		return gitURL{shown: raw}, field.ErrorList{field.Invalid(p, raw, "remove the leading and trailing white space")}
	}
	if strings.ContainsFunc(raw, isControl) {
		return gitURL{shown: raw}, field.ErrorList{field.Invalid(p, raw, "must not contain control characters")}
	}
	if !strings.Contains(raw, "://") {
		return parseSCPLike(raw, p)
	}

	u, err := url.Parse(raw)
	if err != nil {
		return gitURL{shown: raw}, field.ErrorList{field.Invalid(p, raw, fmt.Sprintf("not a URL (%v): use %s", unwrapURLError(err), acceptedGitURLs))}
	}
	g := gitURL{scheme: u.Scheme, shown: redactURL(u)}
	var errs field.ErrorList
	switch u.Scheme {
	case "https", "http", "git":
		if u.User != nil {
			errs = append(errs, field.Forbidden(p, "must not carry credentials (user:password@ or token@): put credentials in the Secret named by spec.secretRef"))
		}
	case "ssh":
		if _, hasPassword := u.User.Password(); hasPassword {
			errs = append(errs, field.Forbidden(p, "must not carry a password (user:password@): keep the user name and put the SSH key in the Secret named by spec.secretRef"))
		}
	case "file":
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") {
			return g, append(errs, field.Invalid(p, g.shown, "a file:// URL names an absolute path on the host, with three slashes: file:///srv/site.git"))
		}
		return g, errs
	default:
		return g, append(errs, field.Invalid(p, g.shown, fmt.Sprintf("scheme %q is not supported: use %s", u.Scheme, acceptedGitURLs)))
	}
	switch {
	case u.Hostname() == "":
		errs = append(errs, field.Invalid(p, g.shown, fmt.Sprintf("names no host: write %s://host/path", u.Scheme)))
	case strings.HasPrefix(u.Hostname(), "-"):
		errs = append(errs, field.Invalid(p, g.shown, `the host must not start with "-"`))
	case u.Path == "" || u.Path == "/":
		errs = append(errs, field.Invalid(p, g.shown, fmt.Sprintf("names no repository: write %s://host/path", u.Scheme)))
	}
	if u.User != nil && strings.HasPrefix(u.User.Username(), "-") {
		errs = append(errs, field.Invalid(p, g.shown, `the user name must not start with "-"`))
	}
	return g, errs
}

// parseSCPLike checks a URL without "://": git reads user@host:path (a colon before the
// first slash) as ssh, anything else as a local path.
func parseSCPLike(raw string, p *field.Path) (gitURL, field.ErrorList) {
	g := gitURL{scheme: "scp", shown: raw}
	colon, slash := strings.Index(raw, ":"), strings.Index(raw, "/")
	if colon < 0 || (slash >= 0 && slash < colon) {
		g.scheme = ""
		if strings.HasPrefix(raw, "/") {
			return g, field.ErrorList{field.Invalid(p, raw, "a local repository is written as a file:// URL: use file://"+raw)}
		}
		return g, field.ErrorList{field.Invalid(p, raw, "use "+acceptedGitURLs)}
	}
	userHost, path := raw[:colon], raw[colon+1:]
	if h, rest, ok := strings.Cut(raw, "@"); ok && strings.HasPrefix(rest, "[") {
		// user@[host]:path, as git writes an IPv6 address.
		if end := strings.Index(rest, "]:"); end > 0 {
			userHost, path = h+"@"+rest[:end+1], rest[end+2:]
		}
	}
	user, host, ok := strings.Cut(userHost, "@")
	if !ok {
		if at := strings.Index(path, "@"); at >= 0 && !strings.Contains(path[:at], "/") && strings.Contains(path[at:], ":") {
			// user:password@host:path
			g.shown = "xxxxx@" + path[at+1:]
			return g, field.ErrorList{field.Forbidden(p, "must not carry a password (user:password@): keep the user name and put the SSH key in the Secret named by spec.secretRef")}
		}
		return g, field.ErrorList{field.Invalid(p, raw, "an ssh URL without a scheme is written user@host:path (such as git@example.com:org/repo.git); otherwise use "+acceptedGitURLs)}
	}
	var errs field.ErrorList
	switch {
	case user == "" || host == "":
		errs = append(errs, field.Invalid(p, raw, "an ssh URL without a scheme is written user@host:path (such as git@example.com:org/repo.git)"))
	case strings.HasPrefix(user, "-") || strings.HasPrefix(host, "-"):
		errs = append(errs, field.Invalid(p, raw, `the user and host must not start with "-"`))
	case strings.ContainsAny(userHost, " \t"):
		errs = append(errs, field.Invalid(p, raw, "the user and host must not contain white space"))
	}
	if path == "" {
		errs = append(errs, field.Invalid(p, raw, "names no repository: write user@host:path"))
	}
	return g, errs
}

// redactURL returns u as it can be shown: the password of any URL, and the whole user part
// of an http(s) or git URL (often a token), replaced.
func redactURL(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	c := *u
	if _, hasPassword := u.User.Password(); hasPassword || u.Scheme != "ssh" {
		if u.Scheme == "ssh" {
			c.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			c.User = url.User("xxxxx")
		}
	}
	return c.String()
}

// unwrapURLError drops url.Error's repetition of the URL, which may carry credentials.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// validateGitRef checks that exactly one of branch, tag, semver and commit is set, and
// that it is well-formed. A nil ref is defaulted before validation.
func validateGitRef(ref *flotillav1alpha1.GitRef, p *field.Path) field.ErrorList {
	var set []string
	for _, f := range []struct{ name, value string }{
		{"branch", ref.Branch}, {"tag", ref.Tag}, {"semver", ref.Semver}, {"commit", ref.Commit},
	} {
		if f.value != "" {
			set = append(set, f.name)
		}
	}
	var errs field.ErrorList
	switch len(set) {
	case 0:
		return field.ErrorList{field.Required(p, "set one of branch, tag, semver or commit")}
	case 1:
	default:
		errs = append(errs, field.Forbidden(p, fmt.Sprintf("%s are set: set exactly one of branch, tag, semver or commit",
			strings.Join(set, " and "))))
	}
	if ref.Branch != "" {
		errs = append(errs, validateRefName(ref.Branch, "branch", p.Child("branch"))...)
	}
	if ref.Tag != "" {
		errs = append(errs, validateRefName(ref.Tag, "tag", p.Child("tag"))...)
	}
	if ref.Semver != "" {
		if _, err := semver.NewConstraint(ref.Semver); err != nil {
			errs = append(errs, field.Invalid(p.Child("semver"), ref.Semver, fmt.Sprintf(
				"not a version range (%v): write a range such as \">=1.2.0 <2.0.0\" or \"~1.4\"", err)))
		}
	}
	if ref.Commit != "" && !commitPattern.MatchString(ref.Commit) {
		errs = append(errs, field.Invalid(p.Child("commit"), ref.Commit,
			"must be the full SHA-1 of the commit: 40 lower-case hex digits"))
	}
	return errs
}

// validateRefName checks a branch or tag name (without refs/heads/ or refs/tags/) against
// the rules of git check-ref-format, and those git branch adds.
func validateRefName(name, what string, p *field.Path) field.ErrorList {
	bad := func(why string) field.ErrorList {
		return field.ErrorList{field.Invalid(p, name, fmt.Sprintf("not a valid %s name: %s", what, why))}
	}
	switch {
	case strings.HasPrefix(name, "refs/"):
		short := strings.TrimPrefix(strings.TrimPrefix(name, "refs/heads/"), "refs/tags/")
		return bad(fmt.Sprintf("write the short name %q, without refs/heads/ or refs/tags/", short))
	case name == "@" || (what == "branch" && name == "HEAD"):
		return bad(fmt.Sprintf("%q is not a %s name git accepts", name, what))
	case strings.HasPrefix(name, "-"):
		return bad(`must not start with "-"`)
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/"):
		return bad(`must not start or end with "/"`)
	case strings.Contains(name, "//"):
		return bad(`must not contain "//"`)
	case strings.Contains(name, ".."):
		return bad(`must not contain ".."`)
	case strings.Contains(name, "@{"):
		return bad(`must not contain "@{"`)
	case strings.HasSuffix(name, "."):
		return bad(`must not end with "."`)
	case strings.ContainsFunc(name, func(r rune) bool { return isControl(r) || r == ' ' }):
		return bad("must not contain spaces or control characters")
	case strings.ContainsAny(name, "~^:?*[\\"):
		return bad(`must not contain any of ~ ^ : ? * [ \`)
	}
	for c := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(c, ".") {
			return bad(fmt.Sprintf(`no part may start with "." (%q)`, c))
		}
		if strings.HasSuffix(c, ".lock") {
			return bad(fmt.Sprintf(`no part may end with ".lock" (%q)`, c))
		}
	}
	return nil
}

// validateRepoPath checks spec.path: a relative path that stays inside the repository.
func validateRepoPath(path string, p *field.Path) field.ErrorList {
	switch {
	case path == "":
		return nil
	case strings.ContainsAny(path, "\\\x00"):
		return field.ErrorList{field.Invalid(p, path, `must not contain "\" or NUL: separate directories with "/"`)}
	case strings.HasPrefix(path, "/"):
		return field.ErrorList{field.Invalid(p, path, "must be relative to the repository's root: remove the leading \"/\"")}
	}
	for e := range strings.SplitSeq(path, "/") {
		if e == ".." {
			return field.ErrorList{field.Invalid(p, path, `must not contain "..": name a directory inside the repository`)}
		}
	}
	return nil
}

// validateSecretRef checks a reference to a Secret in the GitSource's namespace.
func validateSecretRef(ref *flotillav1alpha1.LocalObjectReference, p *field.Path) field.ErrorList {
	if ref == nil {
		return nil
	}
	if ref.Name == "" {
		return field.ErrorList{field.Required(p.Child("name"), "set the name of a Secret in the GitSource's namespace, or remove "+p.String())}
	}
	return isDNSSubdomain(p.Child("name"), ref.Name)
}

// validateRollout checks spec.rollout: the sites it waits for, by name or label selector.
func validateRollout(r *flotillav1alpha1.GitRollout, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	ap := p.Child("after")
	if len(r.After.Sites) == 0 && strings.TrimSpace(r.After.Selector) == "" {
		errs = append(errs, field.Required(ap, "name the sites that run a revision first: set after.sites (site names) or after.selector (such as tier=canary), or remove spec.rollout"))
	}
	seen := map[string]bool{}
	for i, site := range r.After.Sites {
		if msgs := utilvalidation.IsDNS1123Label(site); len(msgs) > 0 {
			errs = append(errs, field.Invalid(ap.Child("sites").Index(i), site, "a site name (flotilla agent --site) is a DNS label: "+strings.Join(msgs, "; ")))
		}
		if seen[site] {
			errs = append(errs, field.Duplicate(ap.Child("sites").Index(i), site))
		}
		seen[site] = true
	}
	if sel := strings.TrimSpace(r.After.Selector); sel != "" {
		if _, err := labels.Parse(sel); err != nil {
			errs = append(errs, field.Invalid(ap.Child("selector"), r.After.Selector, "not a label selector: "+err.Error()+` (write it as kubectl -l takes it, such as "tier=canary" or "tier in (canary,early)")`))
		}
	}
	if r.Soak != nil && r.Soak.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("soak"), r.Soak.Duration.String(), "must not be negative: set how long the sites of after must have run a revision healthy, such as 10m (0s: as soon as they report it Healthy)"))
	}
	return errs
}

// validateDependsOn checks the GitSources this one waits for.
func validateDependsOn(gs *flotillav1alpha1.GitSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[flotillav1alpha1.NamespacedObjectReference]bool{}
	for i, d := range gs.Spec.DependsOn {
		ip := p.Index(i)
		if d.Namespace != "" {
			errs = append(errs, isDNSLabel(ip.Child("namespace"), d.Namespace)...)
		}
		if d.Name == "" {
			errs = append(errs, field.Required(ip.Child("name"), "set the name of the GitSource to wait for"))
			continue
		}
		errs = append(errs, isDNSSubdomain(ip.Child("name"), d.Name)...)
		key := d
		if key.Namespace == "" {
			key.Namespace = gs.Namespace
		}
		if key.Namespace == gs.Namespace && key.Name == gs.Name {
			errs = append(errs, field.Invalid(ip, d.Name, "a GitSource cannot depend on itself: remove this entry"))
		} else if seen[key] {
			errs = append(errs, field.Duplicate(ip, key.Namespace+"/"+key.Name))
		}
		seen[key] = true
	}
	return errs
}
