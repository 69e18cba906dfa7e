package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"sort"
	"strings"

	"github.com/distribution/reference"
)

// DockerConfig holds the registry credentials of a docker config file: the data of a Secret of
// type kubernetes.io/dockerconfigjson (key .dockerconfigjson, {"auths": {KEY: {...}}}) or
// kubernetes.io/dockercfg (key .dockercfg, {KEY: {...}}). KEY is a registry host, optionally with
// a scheme, a path prefix and *-globs of whole host labels, as the kubelet reads it.
type DockerConfig struct {
	entries []dockerEntry
}

type dockerEntry struct {
	key        string
	host, port string
	path       string
	cred       Credential
}

type dockerAuthEntry struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	Email         string `json:"email,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
}

// ParseDockerConfigJSON parses a .dockerconfigjson document.
func ParseDockerConfigJSON(data []byte) (DockerConfig, error) {
	var doc struct {
		Auths map[string]dockerAuthEntry `json:"auths"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return DockerConfig{}, fmt.Errorf(".dockerconfigjson: %w", err)
	}
	return newDockerConfig(doc.Auths, ".dockerconfigjson: auths")
}

// ParseDockerCfg parses a legacy .dockercfg document.
func ParseDockerCfg(data []byte) (DockerConfig, error) {
	var auths map[string]dockerAuthEntry
	if err := json.Unmarshal(data, &auths); err != nil {
		return DockerConfig{}, fmt.Errorf(".dockercfg: %w", err)
	}
	return newDockerConfig(auths, ".dockercfg")
}

func newDockerConfig(auths map[string]dockerAuthEntry, where string) (DockerConfig, error) {
	var dc DockerConfig
	for _, key := range sortedKeys(auths) {
		a := auths[key]
		cred := Credential{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken}
		if a.Auth != "" {
			user, pass, err := decodeAuth(a.Auth)
			if err != nil {
				return DockerConfig{}, fmt.Errorf("%s.%q.auth: %w", where, key, err)
			}
			cred.Username, cred.Password = user, pass
		}
		if cred.empty() {
			continue
		}
		host, port, p, err := parseCredentialKey(key)
		if err != nil {
			return DockerConfig{}, fmt.Errorf("%s: key %q: %w", where, key, err)
		}
		dc.entries = append(dc.entries, dockerEntry{key: key, host: host, port: port, path: p, cred: cred})
	}
	return dc, nil
}

// parseCredentialKey splits a docker config key ("https://index.docker.io/v1/", "reg:5000",
// "*.example.com/team") into host, port and path prefix. Docker Hub's names become docker.io.
func parseCredentialKey(key string) (host, port, p string, err error) {
	k := key
	if !strings.Contains(k, "://") {
		k = "https://" + k
	}
	u, err := url.Parse(k)
	if err != nil {
		return "", "", "", err
	}
	if u.Host == "" {
		return "", "", "", errors.New("no registry host")
	}
	host, port = u.Host, ""
	if h, pt, err := net.SplitHostPort(u.Host); err == nil {
		host, port = h, pt
	}
	host = canonicalRegistry(host)
	p = strings.Trim(u.Path, "/")
	if p == "v1" || p == "v2" {
		p = ""
	}
	return host, port, p, nil
}

func canonicalRegistry(host string) string {
	switch host {
	case "index.docker.io", "registry-1.docker.io":
		return "docker.io"
	}
	return host
}

// Credentials returns the credentials whose key matches image, the most specific (longest key)
// first, as the kubelet orders them.
func (dc DockerConfig) Credentials(image string) []Credential {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil
	}
	domain := reference.Domain(named)
	host, port := domain, ""
	if h, pt, err := net.SplitHostPort(domain); err == nil {
		host, port = h, pt
	}
	host = canonicalRegistry(host)
	repo := reference.Path(named)
	var matched []dockerEntry
	for _, e := range dc.entries {
		if e.port != port || !hostMatches(e.host, host) {
			continue
		}
		if e.path != "" && repo != e.path && !strings.HasPrefix(repo, e.path+"/") {
			continue
		}
		matched = append(matched, e)
	}
	sort.SliceStable(matched, func(i, j int) bool { return len(matched[i].key) > len(matched[j].key) })
	out := make([]Credential, 0, len(matched))
	for _, e := range matched {
		out = append(out, e.cred)
	}
	return out
}

// hostMatches matches a host against a pattern whose labels may be globs ("*.example.com"
// matches "a.example.com", not "a.b.example.com").
func hostMatches(pattern, host string) bool {
	pp, hp := strings.Split(pattern, "."), strings.Split(host, ".")
	if len(pp) != len(hp) {
		return false
	}
	for i := range pp {
		if ok, err := path.Match(pp[i], hp[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

// RegistryHost returns the registry host of an image reference (docker.io for Docker Hub).
func RegistryHost(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", image, err)
	}
	return reference.Domain(named), nil
}
